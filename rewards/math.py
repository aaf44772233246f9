"""Reward for GSM8K / MATH GRPO (e.g. Qwen2.5-7B): is the last \\boxed answer equal to the ground truth?

verl 0.9.1 contract: ``reward.custom_reward_function.path=pkg://verl_recipes.rewards.math`` (name ``compute_score``).
Returns, for every response, the same keys with numeric values only, because verl turns them into
metrics and arrays:
- ``score``: 1.0 correct, 0.0 otherwise. No format bonus: GRPO only compares scores within a group, and
  rewarding a boxed wrong answer would only teach boxing.
- ``acc``: same as score (what ``algorithm.filter_groups.metric=acc`` and validation read).
- ``format``: 1.0 when a usable boxed answer was found.
- ``timeout``: 1.0 when the equivalence check overran ``timeout_s`` (or its worker died) and was counted wrong.
The extracted answer itself is not returned: strings break verl's metric reduction.
"""

from verl_recipes.rewards.grading import DEFAULT_TIMEOUT_S, extract_last_boxed, grade


def compute_score(data_source, solution_str, ground_truth, extra_info=None, timeout_s=DEFAULT_TIMEOUT_S, **kwargs):
    answer = extract_last_boxed(solution_str)
    correct, timed_out = grade(answer, ground_truth, timeout_s)
    return {
        "score": float(correct),
        "acc": float(correct),
        "format": float(answer is not None),
        "timeout": float(timed_out),
    }

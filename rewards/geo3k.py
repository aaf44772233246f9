"""Reward for hiyouga/geometry3k (GRPO or DAPO on Qwen2.5-VL), as verl's geo3k reward:
score = 0.9 * acc + 0.1 * format.

verl 0.9.1 contract: ``reward.custom_reward_function.path=pkg://verl_recipes.rewards.geo3k`` (name ``compute_score``).
Returns numeric values only, with the same keys for every response:
- ``acc``: 1.0 when the last \\boxed answer equals the ground truth (mathruler, then math-verify). DAPO's
  dynamic sampling filters on it with ``algorithm.filter_groups.metric=acc``; no ``dapo`` reward manager
  is needed for that, because the key comes from here.
- ``format``: 1.0 for ``<think>...</think>`` first (leading whitespace allowed), then a \\boxed{} answer.
- ``timeout``: 1.0 when the equivalence check overran ``timeout_s`` (or its worker died) and was counted wrong.
"""

from verl_recipes.rewards.grading import DEFAULT_TIMEOUT_S, extract_last_boxed, grade


def compute_score(data_source, solution_str, ground_truth, extra_info=None, timeout_s=DEFAULT_TIMEOUT_S, **kwargs):
    correct, timed_out = grade(extract_last_boxed(solution_str), ground_truth, timeout_s)
    acc, well_formatted = float(correct), float(_well_formatted(solution_str))
    return {
        "score": 0.9 * acc + 0.1 * well_formatted,
        "acc": acc,
        "format": well_formatted,
        "timeout": float(timed_out),
    }


def _well_formatted(text: str) -> bool:
    # Same rule as verl's `<think>.*</think>.*\\boxed\{.*\}.*` fullmatch, without its regex backtracking.
    text = text.lstrip()
    think_end = text.find("</think>")
    return text.startswith("<think>") and think_end >= 0 and extract_last_boxed(text[think_end:]) is not None

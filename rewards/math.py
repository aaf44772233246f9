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

Where the ground truth is a plain number (GSM8K, the generated sums), the box must hold a value, not a sum or product
still to be worked out: ``\\boxed{7 + 8}`` for "What is 7 + 8?" restates the question, and the equivalence check
would pay it. ``\\boxed{5 + 10 = 15}`` is a value (one side of it is a number); fractions are values. Markdown bold
around the boxed answer (``\\boxed{**15**}``) is dropped.
"""

import re

from verl_recipes.rewards.grading import DEFAULT_TIMEOUT_S, _plain_number, extract_last_boxed, grade

# a +, -, *, x, dot or divide sign between two operands: a leading minus (-3) or an exponent's (10^{-3}) is no such sign
_BINARY_OPERATION = re.compile(r"[\d.)}]\s*(?:\+|-|\*|\\times|\\cdot|\\div|×|÷)\s*[\d.({\\]")
_BOLD = re.compile(r"\*{1,2}(.+?)\*{1,2}")


def unevaluated(answer: str) -> bool:
    """Whether `answer` is arithmetic still to be done: no side of it (split at '=') is free of +, -, x, dot or
    divide signs between operands and holds a digit."""
    return not any(re.search(r"\d", side) and not _BINARY_OPERATION.search(side) for side in answer.split("="))


def compute_score(data_source, solution_str, ground_truth, extra_info=None, timeout_s=DEFAULT_TIMEOUT_S, **kwargs):
    answer = extract_last_boxed(solution_str)
    if answer is not None and (bold := _BOLD.fullmatch(answer)):
        answer = bold.group(1).strip()
    if answer is not None and _plain_number(str(ground_truth)) is not None and unevaluated(answer):
        correct, timed_out = False, False
    else:
        correct, timed_out = grade(answer, ground_truth, timeout_s)
    return {
        "score": float(correct),
        "acc": float(correct),
        "format": float(answer is not None),
        "timeout": float(timed_out),
    }

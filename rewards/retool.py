"""Reward for ReTool (code-sandbox agent on DAPO-Math-17k, validated on AIME): +1 when the last \\boxed
answer equals the (integer) ground truth, else -1 raised by a tool-use bonus as in verl-recipe's ReTool:
``min(-0.6, -1 + (num_turns - 2) / 2 * 0.1)``, so a wrong answer that used the sandbox is punished less.

verl 0.9.1 contract: ``reward.custom_reward_function.path=pkg://verl_recipes.rewards.retool`` (name ``compute_score``).
num_turns is ``extra_info["num_turns"]``: the tool agent loop reports user + assistant turns + 1 (2 with
no tool call, +2 per tool round) as ``__num_turns__``, and the ``naive`` and ``remote`` reward managers copy
it into extra_info. The ``dapo``, ``gdpo`` and ``limited`` managers do not, so then it is estimated as
``2 + 2 * count("<tool_call>")`` in the response (Qwen's ``<tool_call>`` survives skip_special_tokens).

Returns numeric values only, same keys for every response: ``score``, ``acc`` (1.0/0.0), ``format`` (a
boxed answer was found), ``timeout`` (the equivalence check overran ``timeout_s`` or its worker died),
``turns`` (the num_turns used).
"""

from verl_recipes.rewards.grading import DEFAULT_TIMEOUT_S, extract_last_boxed, grade


def compute_score(data_source, solution_str, ground_truth, extra_info=None, timeout_s=DEFAULT_TIMEOUT_S, **kwargs):
    answer = extract_last_boxed(solution_str)
    correct, timed_out = grade(answer, ground_truth, timeout_s)
    turns = _num_turns(solution_str, extra_info)
    return {
        "score": 1.0 if correct else min(-0.6, -1.0 + (turns - 2) / 2 * 0.1),
        "acc": float(correct),
        "format": float(answer is not None),
        "timeout": float(timed_out),
        "turns": float(turns),
    }


def _num_turns(solution_str: str, extra_info) -> int:
    turns = (extra_info or {}).get("num_turns")
    if turns is None:
        return 2 + 2 * solution_str.count("<tool_call>")
    return int(turns)

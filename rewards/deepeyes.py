"""Reward for DeepEyes (Qwen2.5-VL image-zoom agent), weighted as verl-recipe's DeepEyes reward:
score = 0.8 * acc + 0.2 * (format - 1) + 1.2 * tool_bonus.

- acc: the last ``<answer>...</answer>`` matches the ground truth. ``compute_score`` matches by rules
  (normalised text; a choice letter, with or without its option text; one number, equal in value, fractions
  and decimals alike; yes/no by the first word; a short ground truth inside a short, unnegated sentence);
  ``compute_score_judge`` asks an LLM judge, as verl-recipe's DeepEyes does, and falls back to the rules when
  the judge fails or answers neither CORRECT nor INCORRECT. An answer of ``MAX_ANSWER_CHARS`` or more is no
  answer (judge hacking).
- format: exactly one answer block; <think>, <answer> and <tool_call> tags balanced. A format error costs
  0.2, as in the original recipe (its format term is -1 on error, else 0).
- tool_bonus: 1.0 when the answer is correct and a tool was used (``<tool_call>`` in the response, or
  ``extra_info["num_turns"] > 2``).

verl 0.9.1 contract: ``reward.custom_reward_function.path=pkg://verl_recipes.rewards.deepeyes``, name
``compute_score`` or ``compute_score_judge``. The judge is found, in this order: verl's own generative reward
model (``reward.reward_model.enable=true``: verl serves ``reward.reward_model.model_path`` with vLLM or SGLang and
passes its router as ``reward_router_address``; the variant ``judge`` of the DeepEyes recipe), or ``judge_url`` (a
base URL such as ``http://host:18901/v1``) from the reward kwargs, or the env var ``LLM_AS_A_JUDGE_BASE``; the
model name is ``judge_model`` or ``LLM_AS_A_JUDGE_MODEL``. We POST to ``{base}/chat/completions``. Both functions return the same keys, all numeric: score, acc, format,
tool_bonus, tool_calls, judged (1.0 when the judge's verdict was used).
"""

import http.client
import json
import logging
import math
import os
import re
import urllib.request

from verl_recipes.rewards.grading import MAX_TAIL_CHARS

MAX_ANSWER_CHARS = 1000
JUDGE_TIMEOUT_S = 10.0

logger = logging.getLogger(__name__)

_CHOICE = re.compile(r"\(?([A-Za-z])\)?\.?")
_CHOICE_PREFIX = re.compile(r"\(?([A-Za-z])\)?(?:[.:)]|\s|$)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+(?:\.\d+)?)?")  # 3, -0.5, 1/2
# "(B) red car", "B. red car", "B: red car": a choice letter with its option text
_CHOICE_WITH_TEXT = re.compile(r"\(?([A-Za-z])\)?[.:)]?\s+(.+)")
_NEGATION = {"not", "no", "never", "neither", "nor", "isn't", "aren't", "doesn't", "don't", "cannot", "can't"}
SHORT_TRUTH_WORDS = 3  # a ground truth this short may stand inside a sentence ("The countertop is tan.")
SHORT_ANSWER_WORDS = 12

JUDGE_SYSTEM_PROMPT = (
    "You grade answers. Decide whether the model's answer means the same as the reference answer for the "
    "question. Be strict: a partly correct or hedged answer is wrong. Reply with one word: CORRECT or INCORRECT."
)
JUDGE_USER_PROMPT = "Question: {question}\nReference answer: {ground_truth}\nModel's answer: {answer}\nVerdict:"


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    answer = final_answer(solution_str)
    correct = answer is not None and answers_match(answer, str(ground_truth))
    return _result(solution_str, extra_info, answer, correct, judged=False)


def compute_score_judge(
    data_source,
    solution_str,
    ground_truth,
    extra_info=None,
    judge_url=None,
    judge_model=None,
    judge_timeout_s=JUDGE_TIMEOUT_S,
    reward_router_address=None,
    **kwargs,
):
    if reward_router_address:  # verl's generative reward model, served by verl (reward.reward_model)
        judge_url = f"http://{reward_router_address}/v1"
    judge_url = judge_url or os.environ.get("LLM_AS_A_JUDGE_BASE")
    judge_model = judge_model or os.environ.get("LLM_AS_A_JUDGE_MODEL")
    if not judge_url or not judge_model:
        raise ValueError(
            "compute_score_judge needs the judge's base URL and model name: enable verl's reward model "
            "(VARIANT=judge), or set the reward kwargs judge_url and judge_model, or the env vars "
            "LLM_AS_A_JUDGE_BASE and LLM_AS_A_JUDGE_MODEL"
        )
    answer = final_answer(solution_str)
    verdict = None
    if answer is not None:
        question = str((extra_info or {}).get("question", ""))
        prompt = JUDGE_USER_PROMPT.format(question=question, ground_truth=ground_truth, answer=answer)
        verdict = _ask_judge(judge_url, judge_model, prompt, judge_timeout_s)
    correct = verdict if verdict is not None else answer is not None and answers_match(answer, str(ground_truth))
    return _result(solution_str, extra_info, answer, correct, judged=verdict is not None)


def final_answer(text: str) -> str | None:
    """Content of the last <answer>...</answer> block, or None (missing, empty or too long)."""
    tail = text[-MAX_TAIL_CHARS:]
    end = tail.rfind("</answer>")
    start = tail.rfind("<answer>", 0, max(end, 0))
    if end < 0 or start < 0:
        return None
    answer = tail[start + len("<answer>") : end].strip()
    return answer if answer and len(answer) < MAX_ANSWER_CHARS else None


def answers_match(answer: str, ground_truth: str) -> bool:
    normalised, truth = _normalise(answer), _normalise(ground_truth)
    if normalised == truth:
        return True
    if choice := _CHOICE.fullmatch(ground_truth.strip()):
        return _picked_letter(answer) == choice[1].upper()
    if option := _CHOICE_WITH_TEXT.fullmatch(ground_truth.strip()):  # the letter or the option's text
        return _picked_letter(answer) == option[1].upper() or normalised == _normalise(option[2])
    if _NUMBER.fullmatch(truth):  # one number in the answer, equal as a value: 0.5 = 1/2, 3.0 = 3
        numbers = _NUMBER.findall(normalised)
        return len(numbers) == 1 and math.isclose(_value(numbers[0]), _value(truth), rel_tol=1e-6, abs_tol=1e-9)
    words, truth_words = normalised.split(), truth.split()
    if truth_words[:1] in (["yes"], ["no"]) and len(truth_words) <= 4:  # "yes" = "Yes, it is." = "yes it is"
        return words[:1] == truth_words[:1]
    if len(truth_words) <= SHORT_TRUTH_WORDS and len(words) <= SHORT_ANSWER_WORDS and not _NEGATION & set(words):
        return f" {truth} " in f" {normalised} "  # a short answer inside a short sentence, as whole words
    return False


def _picked_letter(answer: str) -> str | None:
    picked = _CHOICE_PREFIX.match(answer.strip())
    return picked[1].upper() if picked else None


def _value(number: str) -> float:
    top, _, bottom = number.partition("/")
    return float(top) / float(bottom) if bottom and float(bottom) else float(top) if not bottom else math.nan


def _normalise(text: str) -> str:
    """Lower case; thousands commas, punctuation (not decimal points or fraction bars) and a leading article dropped."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.lower())
    words = re.sub(r"[^\w\s./-]|(?<!\d)[./]|[./](?!\d)", " ", text).split()  # keeps 0.5 and 1/2
    return " ".join(words[1:] if len(words) > 1 and words[0] in ("a", "an", "the") else words)


def _ask_judge(url: str, model: str, prompt: str, timeout_s: float) -> bool | None:
    """The judge's verdict, or None when it is unreachable, slow or answers something else."""
    body = {
        "model": model,
        "temperature": 0.0,
        "max_tokens": 16,
        "messages": [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": prompt}],
    }
    request = urllib.request.Request(
        url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            reply = json.loads(response.read(1 << 16))["choices"][0]["message"]["content"]
        correct, incorrect = (re.search(rf"\b{word}\b", reply, re.IGNORECASE) for word in ("CORRECT", "INCORRECT"))
    except (OSError, ValueError, LookupError, TypeError, http.client.HTTPException) as error:
        logger.warning("LLM judge at %s failed (%r); using rule-based matching", url, error)
        return None
    if bool(correct) == bool(incorrect):
        logger.warning("LLM judge at %s answered %.200r, not CORRECT/INCORRECT; using rule-based matching", url, reply)
        return None
    return bool(correct)


def _result(solution_str: str, extra_info, answer: str | None, correct: bool, judged: bool) -> dict:
    tool_calls = solution_str.count("<tool_call>")
    used_tool = tool_calls > 0 or int((extra_info or {}).get("num_turns") or 0) > 2
    well_formed = answer is not None and _tags_balanced(solution_str)
    tool_bonus = float(correct and used_tool)
    return {
        "score": 0.8 * correct + 0.2 * (well_formed - 1) + 1.2 * tool_bonus,
        "acc": float(correct),
        "format": float(well_formed),
        "tool_bonus": tool_bonus,
        "tool_calls": float(tool_calls),
        "judged": float(judged),
    }


def _tags_balanced(text: str) -> bool:
    return (
        text.count("<answer>") == text.count("</answer>") == 1
        and text.count("<think>") == text.count("</think>")
        and text.count("<tool_call>") == text.count("</tool_call>")
    )

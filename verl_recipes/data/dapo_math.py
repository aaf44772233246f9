"""dapo_math / dapo_math_retool: BytedTsinghua-SIA/DAPO-Math-17k for training, AIME 2024 and 2025 for validation.

Files: train.parquet (DAPO-Math-17k), aime2024.parquet (Maxwell-Jia/AIME_2024), aime2025.parquet
(yentinglin/aime_2025: one config, 30 problems, `problem`/`answer` columns; the AIME set verl-recipe's ReTool
validates on).

DAPO-Math-17k is published with its ~17k problems repeated (about 1.79M rows); repeats of a (problem, answer)
pair are skipped and counted, so one epoch is one pass over the distinct problems.

Flavours, sharing the problem extraction:
- dapo_math: every prompt is the DAPO template (problem between DAPO_PREFIX and DAPO_SUFFIX, "Answer: ..."),
  AIME problems included, so validation asks in the form training rewards. data_source "math_dapo",
  "aime2024", "aime2025": the names verl's default reward routes to its math_dapo scorer.
- dapo_math_retool: problem + RETOOL_INSTRUCTION (code_interpreter tool, answer in \\boxed{}) and
  agent_name "tool_agent", which makes verl run the row through its tool agent loop.
"""

import re
from functools import partial

from verl_recipes.data.common import BadRow, Part, Spec, Stream, text_field
from verl_recipes.data.prompts import DAPO_PREFIX, DAPO_SUFFIX, RETOOL_INSTRUCTION

DAPO = "BytedTsinghua-SIA/DAPO-Math-17k"
AIME2024 = "Maxwell-Jia/AIME_2024"
AIME2025 = "yentinglin/aime_2025"

_DAPO_TEMPLATE = re.compile(
    re.escape(DAPO_PREFIX.split("\n")[0]) + r"\s*\n\n(?P<problem>.*)" + re.escape(DAPO_SUFFIX.strip()) + r"\s*",
    re.DOTALL,
)


def dapo_problem(row: dict) -> str:
    prompt = row["prompt"]
    if not isinstance(prompt, list) or not prompt or not isinstance(prompt[-1], dict):
        raise BadRow("prompt is not a chat message list")
    match = _DAPO_TEMPLATE.fullmatch(prompt[-1].get("content") or "")
    if match is None or not match["problem"].strip():
        raise BadRow("prompt does not follow the DAPO-Math template")
    return match["problem"].strip()


def _ground_truth(row: dict) -> str:
    reward_model = row["reward_model"]
    answer = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    if not isinstance(answer, str) or not answer.strip():
        raise BadRow("reward_model.ground_truth is missing or empty")
    return answer.strip()


def _aime_answer(value) -> str:
    text = str(value).strip() if value is not None else ""
    if not text.isdigit():
        raise BadRow(f"AIME answer {text[:40]!r} is not an integer")
    return str(int(text))


def _row(data_source: str, problem: str, answer: str, retool: bool) -> dict:
    content = problem + RETOOL_INSTRUCTION if retool else DAPO_PREFIX + problem + DAPO_SUFFIX
    row = {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": content}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"question": problem, "answer": answer},
    }
    if retool:
        row["agent_name"] = "tool_agent"
    return row


def dapo_row(row: dict, note, *, retool: bool) -> dict:
    return _row("math_dapo", dapo_problem(row), _ground_truth(row), retool)


def aime2024_row(row: dict, note, *, retool: bool) -> dict:
    return _row("aime2024", text_field(row, "Problem").strip(), _aime_answer(row["Answer"]), retool)


def aime2025_row(row: dict, note, *, retool: bool) -> dict:
    return _row("aime2025", text_field(row, "problem").strip(), _aime_answer(row["answer"]), retool)


def _problem_and_answer(row: dict) -> tuple[str, str]:
    return row["extra_info"]["question"], row["reward_model"]["ground_truth"]


def spec(retool: bool) -> Spec:
    def flavoured(row_fn):
        return partial(row_fn, retool=retool)

    return Spec(
        parts={"dapo": Part(DAPO), "aime2024": Part(AIME2024), "aime2025": Part(AIME2025)},
        files=("train.parquet", "aime2024.parquet", "aime2025.parquet"),
        streams=(
            Stream(
                "dapo", "train", ("prompt", "reward_model"), flavoured(dapo_row), "train.parquet",
                dedupe_key=_problem_and_answer,
            ),
            Stream("aime2024", "train", ("Problem", "Answer"), flavoured(aime2024_row), "aime2024.parquet"),
            Stream("aime2025", "train", ("problem", "answer"), flavoured(aime2025_row), "aime2025.parquet"),
        ),
    )


SPEC = spec(retool=False)
RETOOL_SPEC = spec(retool=True)

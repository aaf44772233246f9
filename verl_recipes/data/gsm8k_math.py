"""gsm8k_math: openai/gsm8k (main) + DigitalLearningGmbH/MATH-lighteval, boxed-answer prompts.

train.parquet = gsm8k train + MATH train; test.parquet = gsm8k test + MATH test.
"""

from verl_recipes.data.common import Part, Spec, Stream, text_field
from verl_recipes.data.prompts import STEP_BY_STEP_BOXED
from verl_recipes.data.text import boxed_answer, gsm8k_answer

GSM8K = "openai/gsm8k"
MATH = "DigitalLearningGmbH/MATH-lighteval"
# GSM8K rows ask for a \boxed{} answer, but verl's default scorer grades data_source "openai/gsm8k" by the
# "#### <answer>" line of its own prompt (verl/utils/reward_score/gsm8k.py), so under it every sample would score
# 0 without a word. Our own name pairs the rows with a boxed-answer reward: verl's default scorer refuses it
# (NotImplementedError), and configs/reward/math grades it. MATH rows keep verl's name: verl's math_dataset.py asks
# for the same \boxed{} answer, and its scorer grades it so.
GSM8K_BOXED = "gsm8k_boxed"


def _row(data_source: str, question: str, answer: str, ground_truth: str) -> dict:
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"{question} {STEP_BY_STEP_BOXED}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"question": question, "answer": answer},
    }


def gsm8k_row(row: dict, note) -> dict:
    answer = text_field(row, "answer")
    return _row(GSM8K_BOXED, text_field(row, "question"), answer, gsm8k_answer(answer))


def math_row(row: dict, note) -> dict:
    solution = text_field(row, "solution")
    return _row(MATH, text_field(row, "problem"), solution, boxed_answer(solution))


SPEC = Spec(
    parts={"gsm8k": Part(GSM8K, config="main"), "math": Part(MATH)},
    files=("train.parquet", "test.parquet"),
    streams=tuple(
        stream
        for split in ("train", "test")
        for stream in (
            Stream("gsm8k", split, ("question", "answer"), gsm8k_row, f"{split}.parquet"),
            Stream("math", split, ("problem", "solution"), math_row, f"{split}.parquet"),
        )
    ),
)

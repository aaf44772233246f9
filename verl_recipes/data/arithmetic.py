"""arithmetic: generated sums of two whole numbers, boxed-answer prompts (no hub, no network).

Each question is "What is {a} + {b}? Put the final answer in \\boxed{}." with a and b uniform in 1..20; the ground
truth is str(a + b), which rewards/math.py grades (last \\boxed{} answer, checked for equivalence). The rows have the
layout of gsm8k_math's, except that the prompt opens with one worked example (EXAMPLE: the same question for 2 + 3 and
its boxed answer) before the question. Without it SmolLM2-135M-Instruct (the GGUF's weights) answered the bare
question with a boxed right sum in 0 of 128 samples at temperature 1.0 (it writes "\\boxed{}" empty, or no box), so
every GRPO group would score 0 and nothing could be learned; with it, in 13 of 128 (9 of 32 questions had one), and the
right sum stands somewhere in about half of its answers: the box is what there is to learn
(recipes/smollm2-135m-grpo/README.md).

There are only 400 such questions, so test.parquet holds TEST_ROWS of them out, each once, and train.parquet draws
TRAIN_ROWS from the rest (with repeats): validation scores questions never trained on. Everything follows from SEED:
a second preparation writes the same rows.
"""

import random

import datasets

from verl_recipes.data.common import Part, Spec, Stream

DATA_SOURCE = "arithmetic"
QUESTION = "What is {a} + {b}? Put the final answer in \\boxed{{}}."
LOW, HIGH = 1, 20
SEED = 0
TRAIN_ROWS = 2048
TEST_ROWS = 128
PAIRS = [(a, b) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)]
# the questions of test.parquet (rows() draws them first from a generator seeded with SEED)
HELD_OUT = frozenset(random.Random(SEED).sample(PAIRS, TEST_ROWS))
# one worked example before each question: the answer format, shown once
EXAMPLE = ({"role": "user", "content": QUESTION.format(a=2, b=3)},
           {"role": "assistant", "content": "2 + 3 = 5\n\n\\boxed{5}"})


def _row(a: int, b: int) -> tuple[dict, str]:
    question, answer = QUESTION.format(a=a, b=b), str(a + b)
    return {
        "data_source": DATA_SOURCE,
        "prompt": [*map(dict, EXAMPLE), {"role": "user", "content": question}],
        "ability": "math",
        "extra_info": {"question": question, "answer": answer},
    }, answer


def _drawn(rng: random.Random, keep) -> tuple[dict, str]:
    """The row of the first pair (a, b), each uniform in LOW..HIGH, that `keep((a, b))` accepts."""
    while True:
        pair = rng.randint(LOW, HIGH), rng.randint(LOW, HIGH)
        if keep(pair):
            return _row(*pair)


def arithmetic_row(rng: random.Random, held_out: bool | None = None) -> tuple[dict, str]:
    """One row without `reward_model`, and its answer: a and b drawn from `rng`, uniform in LOW..HIGH. The prompt is
    EXAMPLE's two turns, then the question; extra_info["question"] is the question alone. `held_out`: only a question
    of test.parquet (True) or only one of the others (False)."""
    return _drawn(rng, lambda pair: held_out is None or (pair in HELD_OUT) == held_out)


def _graded(row: dict, answer: str) -> dict:
    return {**row, "reward_model": {"style": "rule", "ground_truth": answer}}


def rows(seed: int = SEED, train_rows: int = TRAIN_ROWS, test_rows: int = TEST_ROWS) -> tuple[list[dict], list[dict]]:
    """(train, test) rows: `test_rows` questions held out, each once; `train_rows` drawn from the others."""
    rng = random.Random(seed)
    held_out = rng.sample(PAIRS, test_rows)
    test = [_graded(*_row(a, b)) for a, b in held_out]
    train = [_graded(*_drawn(rng, lambda pair: pair not in held_out)) for _ in range(train_rows)]
    return train, test


def _generate() -> datasets.DatasetDict:
    train, test = rows()
    return datasets.DatasetDict({"train": datasets.Dataset.from_list(train), "test": datasets.Dataset.from_list(test)})


def _as_is(row: dict, note) -> dict:
    return row


SPEC = Spec(
    parts={"arithmetic": Part(f"generated here (seed {SEED})", generate=_generate)},
    files=("train.parquet", "test.parquet"),
    streams=tuple(
        Stream("arithmetic", split, ("data_source", "prompt", "reward_model", "extra_info"), _as_is, f"{split}.parquet")
        for split in ("train", "test")
    ),
)

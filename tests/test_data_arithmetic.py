"""The generated `arithmetic` dataset (verl_recipes/data/arithmetic.py): the exact question, its sum as the ground truth,
the same rows from the same seed, held-out test questions, and parquet files verl reads and the math reward grades."""

import random
import re

import pandas as pd
from omegaconf import OmegaConf

from verl_recipes.check.data_columns import column_problems
from verl_recipes.data import arithmetic, prepare
from verl_recipes.data.arithmetic import arithmetic_row
from verl_recipes.rewards.math import compute_score

QUESTION = re.compile(r"What is (\d+) \+ (\d+)\? Put the final answer in \\boxed\{\}\.")


def test_a_row_is_the_question_and_its_sum():
    row, answer = arithmetic_row(random.Random(3))
    a, b = map(int, QUESTION.fullmatch(row["prompt"][-1]["content"]).groups())
    assert 1 <= a <= 20 and 1 <= b <= 20 and answer == str(a + b)
    # one worked example, then the question
    assert row["prompt"] == [{"role": "user", "content": "What is 2 + 3? Put the final answer in \\boxed{}."},
                             {"role": "assistant", "content": "2 + 3 = 5\n\n\\boxed{5}"},
                             {"role": "user", "content": f"What is {a} + {b}? Put the final answer in \\boxed{{}}."}]
    assert compute_score("arithmetic", row["prompt"][1]["content"], "5")["score"] == 1.0  # the example is graded right
    assert row["data_source"] == "arithmetic" and "reward_model" not in row
    assert row["extra_info"] == {"question": row["prompt"][-1]["content"], "answer": answer}
    assert arithmetic_row(random.Random(3)) == (row, answer)  # the generator's state decides everything


def test_operands_cover_1_to_20():
    rng = random.Random(0)
    seen = {int(n) for _ in range(2000) for n in QUESTION.fullmatch(arithmetic_row(rng)[0]["prompt"][-1]["content"]).groups()}
    assert seen == set(range(1, 21))


def test_the_same_seed_gives_the_same_rows_and_test_questions_are_held_out():
    train, test = arithmetic.rows()
    assert (train, test) == arithmetic.rows()
    assert (len(train), len(test)) == (arithmetic.TRAIN_ROWS, arithmetic.TEST_ROWS)
    test_questions = [r["extra_info"]["question"] for r in test]
    assert len(set(test_questions)) == len(test)  # each held-out question once
    assert not set(test_questions) & {r["extra_info"]["question"] for r in train}
    assert len({r["extra_info"]["question"] for r in train}) == 400 - len(test)  # every other question is trained on
    assert arithmetic.rows(seed=1)[1] != test


def test_prepared_files_are_what_verl_reads_and_the_reward_grades(tmp_path):
    assert prepare.main(["arithmetic", "--out", str(tmp_path)]) == 0
    cfg = OmegaConf.create({"data": {"prompt_key": "prompt", "reward_fn_key": "data_source"}})  # the recipe's keys
    for name, rows in zip(("train", "test"), (arithmetic.TRAIN_ROWS, arithmetic.TEST_ROWS), strict=True):
        path = tmp_path / f"{name}.parquet"
        assert column_problems(str(path), cfg, vision=False) == []
        frame = pd.read_parquet(path)
        assert len(frame) == rows and list(frame["extra_info"].iloc[:2].map(lambda e: e["index"])) == [0, 1]
        first = frame.iloc[0]
        truth = first["reward_model"]["ground_truth"]
        assert compute_score(first["data_source"], f"So \\boxed{{{truth}}}.", truth)["score"] == 1.0
    first_run = pd.read_parquet(tmp_path / "train.parquet")
    assert prepare.main(["arithmetic", "--out", str(tmp_path), "--force"]) == 0
    assert pd.read_parquet(tmp_path / "train.parquet").equals(first_run)

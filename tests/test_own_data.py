"""Own data: `-check` opens the parquet files a recipe reads (schema only) and names what verl would miss; a launch
with data.train_files/val_files overridden prepares nothing of the card's dataset and says so."""

from __future__ import annotations

import pytest
from conftest import ONE_ROW, write_parquet

from verl_recipes import catalog, cli
from verl_recipes.check.recipe import check
from verl_recipes.launch import plan_launch

QWEN = "qwen25-7b-grpo"


def _own(tmp_path, columns: dict) -> list[str]:
    train = write_parquet(tmp_path / "mine/train.parquet", columns)
    val = write_parquet(tmp_path / "mine/val.parquet", ONE_ROW)
    return [f"data.train_files={train}", f"data.val_files={val}"]


def test_own_parquet_with_the_columns_verl_reads_passes(tmp_path):
    assert check(catalog.get(QWEN), _own(tmp_path, ONE_ROW)) == []


def test_a_parquet_without_prompt_is_refused_naming_the_column(tmp_path, capsys):
    columns = {k: v for k, v in ONE_ROW.items() if k != "prompt"} | {"question": ["What is 6 * 7?"]}
    args = _own(tmp_path, columns)
    assert cli.main(["check", QWEN, "--args", " ".join(args)]) == 1
    out = capsys.readouterr().out
    assert f"'data.train_files' = {tmp_path}/mine/train.parquet: no column 'prompt' (data.prompt_key)" in out
    assert "val.parquet" not in out  # the valid file is not blamed


@pytest.mark.slow
def test_ill_typed_columns_are_named_with_their_type(tmp_path):
    columns = {"prompt": ["What is 6 * 7?"], "data_source": [1], "reward_model": [{"answer": "42"}]}
    errors = "\n".join(check(catalog.get(QWEN), _own(tmp_path, columns)))
    assert "column 'prompt' is string, not a list of {role, content} messages" in errors
    assert "column 'data_source' is int64, not a string" in errors
    assert "no column 'reward_model.ground_truth'" in errors and "reward_model is struct<answer: string>" in errors


@pytest.mark.slow
def test_a_vision_language_recipe_needs_images(tmp_path):
    errors = "\n".join(check(catalog.get("qwen25-vl-7b-geo3k-dapo"), _own(tmp_path, ONE_ROW)))
    assert "no column 'images' (data.image_key)" in errors


@pytest.mark.slow
def test_own_data_prepares_nothing_of_the_card_and_says_so(tmp_path, run_env, capsys):
    plan = plan_launch(catalog.get(QWEN), _own(tmp_path, ONE_ROW), dry=True)
    assert plan.data == [] and plan.unused_data == ["gsm8k_math"]
    described = "\n".join(plan.describe())
    assert ("data to prepare: none (the card's gsm8k_math not prepared: data.train_files/val_files name other "
            "files)") in described


@pytest.mark.slow
def test_the_card_data_is_prepared_when_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("RL_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("RL_RUNS_DIR", str(tmp_path / "runs"))
    plan = plan_launch(catalog.get(QWEN), [], dry=True)
    assert plan.data == ["gsm8k_math"] and plan.unused_data == []

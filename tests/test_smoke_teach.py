"""Tiny agent models are taught their recipe's tool call (verl_recipes/smoke/teach.py), so a one-GPU smoke executes tools:
the taught model's sampled first turns parse into the call with verl 0.9.1's own hermes parser."""

import asyncio
import json
import random
from pathlib import Path

import pandas as pd
import pytest
import torch
from verl.experimental.agent_loop.tool_parser import ToolParser

from verl_recipes import catalog
from verl_recipes.compose import compose
from verl_recipes.smoke import teach, tiny, tiny_vl
from verl_recipes.smoke.run import overlay_args
from verl_recipes.smoke.tokenizer import tool_schemas

pytestmark = [pytest.mark.slow, pytest.mark.longest]  # every test here trains a tiny model on the CPU first

REPO = Path(__file__).resolve().parent.parent
RETOOL = catalog.get("retool-qwen25-7b")
DEEPEYES = catalog.get("deepeyes-qwen25-vl-7b")


@pytest.fixture(scope="module")
def taught_retool(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-retool")
    assert tiny.main([str(out), "--recipe", RETOOL.label]) == 0
    return out


def _sample(folder: Path, ids: list[int], seed: int) -> list[int]:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)  # as vLLM serves it
    out = model.generate(torch.tensor([ids]), do_sample=True, temperature=1.0, max_new_tokens=64,
                         eos_token_id=model.config.eos_token_id, pad_token_id=model.config.pad_token_id)
    return out[0, len(ids):].tolist()


def test_taught_model_writes_the_cards_call_that_verl_parses(taught_retool):
    folder = taught_retool / "model"
    rows = pd.read_parquet(taught_retool / "data/dapo_math_retool/aime2024.parquet").to_dict("records")[:8]
    examples = teach.Examples(folder, tool_schemas(REPO / "agents/code_interpreter.yaml"))
    call = RETOOL.card_value("tiny_tool_call")
    parser = ToolParser.get_tool_parser("hermes", examples.tok)
    calls, answers = 0, 0
    for i, row in enumerate(rows):
        _, found = asyncio.run(parser.extract_tool_calls(_sample(folder, examples.prompt(row)[0], i)))
        calls += [(c.name, json.loads(c.arguments)) for c in found] == [("code_interpreter", {"code": "print(6 * 7)"})]
        text, found = asyncio.run(parser.extract_tool_calls(_sample(folder, examples.prompt(row, call)[0], i)))
        answers += not found and "\\boxed{" in text
    assert calls >= 6 and answers >= 6, (calls, answers)  # of 8 each; untaught, a random model writes neither


def test_the_calls_a_learning_run_baselines_on_are_sampled_from_the_model(taught_retool, tmp_path):
    """verl_recipes.learn.build measures a tool task's first-turn calls after its warm-up: the rate is high for a model
    taught to call and near zero for a random one; `copied` counts only the calls that are exactly the expected one."""
    from verl_recipes.learn.build import sampled_calls

    rows = pd.read_parquet(taught_retool / "data/dapo_math_retool/aime2024.parquet").to_dict("records")[:8]
    schemas = tool_schemas(REPO / "agents/code_interpreter.yaml")
    taught = RETOOL.card_value("tiny_tool_call")
    calls = sampled_calls(taught_retool / "model", schemas, rows, lambda row: taught, seed=0)
    assert calls["rate"] >= 0.6 and calls["copied"] >= 0.8, calls
    other = {"name": "code_interpreter", "arguments": {"code": "print(6 * 8)"}}
    assert sampled_calls(taught_retool / "model", schemas, rows, lambda row: other, seed=0)["copied"] == 0.0
    random_model = tiny.MODELS["qwen2"](tmp_path / "random")
    assert sampled_calls(random_model, schemas, rows, lambda row: taught, seed=0)["rate"] < 0.1


def test_agent_prompts_with_their_tool_schemas_fit_the_tiny_budget(taught_retool, tmp_path):
    retool_rows = pd.read_parquet(taught_retool / "data/dapo_math_retool/train.parquet").to_dict("records")
    vl_folder = tiny.MODELS["qwen2_5_vl"](tmp_path / "vl")
    deepeyes_rows = tiny_vl.deepeyes_rows("train", 8, random.Random(0))
    for recipe, folder, rows, tool in [(RETOOL, taught_retool / "model", retool_rows, "code_interpreter"),
                                       (DEEPEYES, vl_folder, deepeyes_rows, "image_zoom")]:
        cfg = compose(recipe, overlay_args(recipe, True, str(folder)))
        examples = teach.Examples(folder, tool_schemas(REPO / f"agents/{tool}.yaml"))
        lengths = [len(examples.prompt(row)[0]) for row in rows]
        assert max(lengths) <= cfg.data.max_prompt_length, (recipe.label, lengths)


def test_deepeyes_tiny_rows_have_the_prepared_layout():
    rows = tiny_vl.deepeyes_rows("train", 4, random.Random(0))
    for row in rows:
        assert [m["role"] for m in row["prompt"]] == ["system", "user"] and row["agent_name"] == "tool_agent"
        assert row["prompt"][1]["content"].count("<image>") == len(row["images"]) == 1


def test_a_call_to_a_tool_the_recipe_lacks_is_refused(tmp_path):
    schemas = tool_schemas(REPO / "agents/code_interpreter.yaml")
    with pytest.raises(ValueError, match="tiny_tool_call names tool 'python'; the recipe's tools are"):
        teach.teach(tmp_path, [], schemas, {"name": "python", "arguments": {}})

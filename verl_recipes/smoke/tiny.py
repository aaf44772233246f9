"""Tiny random-init models and datasets for the one-GPU smoke path: no hub, built in seconds on a CPU.

    python -m verl_recipes.smoke.tiny OUT --recipe qwen25-7b-grpo
writes OUT/model (verl_recipes/random_models.py's tiny model of the recipe's family, with a small BPE tokenizer
trained on the tiny prompts) and OUT/data/<dataset>/...
for each dataset the recipe's card lists, in the same layout `verl_recipes.data.prepare` produces; run the smoke
with RL_DATA_DIR=OUT/data.
"""

from __future__ import annotations

import argparse
import random
from functools import partial
from pathlib import Path

import pandas as pd

from verl_recipes import random_models
from verl_recipes.data.gsm8k_math import GSM8K_BOXED
from verl_recipes.data.prompts import DAPO_PREFIX, DAPO_SUFFIX, RETOOL_INSTRUCTION
from verl_recipes.smoke import tiny_vl
from verl_recipes.smoke.tokenizer import tiny_tokenizer

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BOXED = " Let's think step by step and output the final answer within \\boxed{}."


def _problem(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    return f"Tom has {a} apples and buys {b} more. How many apples does he have?", str(a + b)


def build_tokenizer(folder: Path, rng: random.Random):
    corpus = [" ".join(_problem(rng)) + BOXED + " <think> so the answer is \\boxed{42} </think>" for _ in range(2000)]
    # so the DAPO and ReTool prompts fit 128 tokens
    corpus += [DAPO_PREFIX + _problem(rng)[0] + DAPO_SUFFIX for _ in range(200)]
    corpus += [_problem(rng)[0] + RETOOL_INSTRUCTION for _ in range(200)]
    return tiny_tokenizer(folder, corpus, SPECIAL)


def _math_rows(split: str, n: int, rng: random.Random) -> list[dict]:
    rows = []
    for i in range(n):
        question, answer = _problem(rng)
        rows.append({"data_source": GSM8K_BOXED, "prompt": [{"role": "user", "content": question + BOXED}],
                     "ability": "math", "reward_model": {"style": "rule", "ground_truth": answer},
                     "extra_info": {"split": split, "index": i}})
    return rows


def _dapo_rows(split: str, n: int, rng: random.Random, retool: bool) -> list[dict]:
    """Rows as `prepare dapo_math` writes them (the DAPO template), or `prepare dapo_math_retool` (problem +
    code_interpreter instruction, tool agent)."""
    from verl_recipes.data.dapo_math import _row

    rows = []
    for i in range(n):
        row = _row("math_dapo", *_problem(rng), retool=retool)
        row["extra_info"] = {**row["extra_info"], "split": split, "index": i}
        rows.append(row)
    return rows


# dataset name -> row maker; the file names come from verl_recipes.data.prepare.outputs so the recipe finds them
ROWS = {"gsm8k_math": _math_rows, "geo3k": tiny_vl.geo3k_rows, "dapo_math": partial(_dapo_rows, retool=False),
        "dapo_math_retool": partial(_dapo_rows, retool=True), "deepeyes": tiny_vl.deepeyes_rows}
# family -> MODELS[family](folder, seed=0): random_models' tiny model, its tokenizer trained on the family's tiny prompts
MODELS = {family: partial(random_models.build_tiny, family=family,
                          tokenizer=tiny_vl.build_tokenizer if "vision_config" in config else build_tokenizer)
          for family, config in random_models.TINY.items()}


def write_datasets(datasets: list[str], data_dir: Path, seed: int = 0) -> list[Path]:
    from verl_recipes.data.prepare import outputs

    rng, written = random.Random(seed), []
    for dataset in datasets:
        if dataset not in ROWS:
            raise SystemExit(f"no tiny rows for dataset '{dataset}': add a row maker to verl_recipes/smoke/tiny.py ROWS")
        for path in outputs(dataset, data_dir / dataset):
            path.parent.mkdir(parents=True, exist_ok=True)
            size = 64 if path.stem == "train" else 16
            pd.DataFrame(ROWS[dataset](path.stem, size, rng)).to_parquet(path)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    from verl_recipes import catalog

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--recipe", required=True, help="name[/vN][:variant]; its card says the family and datasets")
    ns = parser.parse_args(argv)
    recipe = catalog.parse(ns.recipe)
    family = recipe.card_value("tiny_family")
    if family not in MODELS:
        raise SystemExit(f"{recipe.label}: its card's tiny_family is {family!r}; this recipe has no one-GPU tiny path "
                         f"(known families: {', '.join(MODELS)})")
    model = MODELS[family](ns.out / "model")
    files = write_datasets(recipe.card_value("data", []), ns.out / "data")
    print(f"tiny {family} model -> {model}; data -> {[str(f) for f in files]}")
    if recipe.card_value("tiny_tool_call"):
        print(f"taught to call its tool: {teach_tool_call(recipe, model, [f for f in files if f.stem == 'train'])}")
    return 0


def recipe_tool_schemas(recipe, model: Path) -> list[dict]:
    """The schemas of the tools the recipe's tiny run gives `model` (none for a recipe without tools)."""
    from verl_recipes.compose import compose
    from verl_recipes.smoke.run import overlay_args
    from verl_recipes.smoke.tokenizer import tool_schemas

    config = compose(recipe, overlay_args(recipe, True, str(model))).actor_rollout_ref.rollout.multi_turn.tool_config_path
    return tool_schemas(Path(str(config))) if config else []


def teach_tool_call(recipe, model: Path, train_files: list[Path]) -> dict:
    """Agent recipes: teach the model the card's `tiny_tool_call` on the recipe's own prompts and tool schemas."""
    from verl_recipes.smoke.teach import teach

    rows = [row for file in train_files for row in pd.read_parquet(file).to_dict("records")]
    return teach(model, rows, recipe_tool_schemas(recipe, model), dict(recipe.card_value("tiny_tool_call")))


if __name__ == "__main__":
    raise SystemExit(main())

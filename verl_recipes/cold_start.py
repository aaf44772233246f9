"""Recipes whose RL stage starts from a supervised cold start (card `cold_start:`, e.g. ReTool).

The card names the SFT script and the run folder it writes; the launcher hands verl the newest Hugging Face folder
that run saved, so `make <recipe>` trains from the cold start by default, as the published run does:

    cold_start:
      script: recipes/retool-qwen25-7b/v1/sft.sh     # what produces it
      run: retool-qwen25-7b-v1-sft                   # its folder under RL_RUNS_DIR

SFT_CHECKPOINT=<hf folder> picks another checkpoint; `ARGS="actor_rollout_ref.model.path=..."` overrides both (for
instance to start from the instruct model on purpose). Without either, and with no checkpoint, the launch stops and
says how to make one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from verl_recipes.catalog import Recipe, RecipeError
from verl_recipes.compose import arg_keys, runs_dir

MODEL_KEY = "actor_rollout_ref.model.path"


def _step(folder: Path) -> int:
    match = re.fullmatch(r"global_step_(\d+)", folder.name)
    return int(match.group(1)) if match else -1


def latest_checkpoint(run: str) -> Path | None:
    """The newest `global_step_N/huggingface` folder (with its config.json) of an SFT run, or None."""
    steps = sorted((runs_dir() / run / "checkpoints").glob("global_step_*"), key=_step)
    for step in reversed(steps):
        if (step / "huggingface" / "config.json").is_file():
            return step / "huggingface"
    return None


def model_args(recipe: Recipe, args: list[str]) -> list[str]:
    """The override that points the recipe at its cold start; [] when the recipe has none or ARGS set the model."""
    spec = recipe.card_value("cold_start")
    if not spec or MODEL_KEY in arg_keys(args):
        return []
    chosen = os.environ.get("SFT_CHECKPOINT")
    if chosen:
        if not (Path(chosen) / "config.json").is_file():
            raise RecipeError(f"SFT_CHECKPOINT={chosen}: no config.json there; point it at the `huggingface` folder "
                              f"of an SFT checkpoint (global_step_N/huggingface)")
        return [f"{MODEL_KEY}={Path(chosen).resolve()}"]
    found = latest_checkpoint(spec["run"])
    if found is None:
        raise RecipeError(
            f"{recipe.label} trains from its cold-start SFT checkpoint, and {runs_dir() / spec['run']}/checkpoints "
            f"holds none. Run `bash {spec['script']}` first (it prints the checkpoint when done), or set "
            f"SFT_CHECKPOINT=<global_step_N/huggingface folder>; to start from the instruct model on purpose, pass "
            f"ARGS=\"{MODEL_KEY}={recipe.card_value('model')}\"")
    return [f"{MODEL_KEY}={found}"]

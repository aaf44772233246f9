"""The card status a recipe's committed node records earn (issue 44): `node-verified (real shape, random init, G x GPU)`.

A record (results/node/<recipe>[-<variant>].<G>x<card>.json, the latest run on that hardware; record.py writes it)
earns it for the recipe it names (`recipe`, its label: name/version[:variant]) when it passed its gates (`passed`) and
ran the recipe's own batch: `args` empty. A record with ARGS (a reduced batch, say) ran another recipe's steps and
earns nothing, nor does one written before records gained `args`. A run at fewer layers than the model's (`layers`
set: the real width, the depth the planner fits) says so in the status, e.g. `..., 2 x H200, 23 of 28 layers)`.

Where several records earn it, the deepest run wins, then the fewest GPUs. tests/test_node_status.py holds every card
that says node-verified to what its records earn, and every card below it to a record that earns it.
"""

from __future__ import annotations

import json
from pathlib import Path

from verl_recipes import catalog
from verl_recipes.catalog import Recipe
from verl_recipes.node.config import num_layers


def folder() -> Path:
    return catalog.root() / "results" / "node"


def records(recipe: Recipe, under: Path | None = None) -> list[dict]:
    """The committed records of `recipe` itself (not its variants' nor other versions'), one per hardware."""
    found = (json.loads(path.read_text()) for path in sorted((under or folder()).glob("*.json")))
    return [record for record in found if record.get("recipe") == recipe.label]


def earns(record: dict) -> bool:
    """Passed its gates at the recipe's own batch: no ARGS (an absent `args` is not known to be none)."""
    return record.get("passed") is True and record.get("args") == []


def status(record: dict) -> str:
    """`node-verified (real shape, random init, G x GPU[, L of N layers])` of a record that earns it."""
    gpu = record["hardware"].split("x", 1)[1].upper()  # 2xh200 -> H200
    depth = ""
    if record.get("layers") is not None:
        model_config = catalog.hf_config(record["shape"])
        depth = f", {record['layers']}" + (f" of {num_layers(model_config)}" if model_config else "") + " layers"
    return f"node-verified (real shape, random init, {record['gpus']} x {gpu}{depth})"


def earned(recipe: Recipe, under: Path | None = None) -> str | None:
    """The node-verified status `recipe`'s committed records earn, or None where none does."""
    passing = [record for record in records(recipe, under) if earns(record)]
    if not passing:
        return None
    best = max(passing, key=lambda record: (record.get("layers") is None, record.get("layers") or 0, -record["gpus"]))
    return status(best)

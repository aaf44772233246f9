"""A card's `node-verified (real shape, random init, G x GPU)` rests on committed node records only
(verl_recipes/node/status.py): a record earns it when it passed its gates at the recipe's own batch (no ARGS); a run at
fewer layers says so. Every card that says it matches what its records earn, and none below it leaves one unclaimed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_recipes import catalog
from verl_recipes.catalog import RecipeError
from verl_recipes.node import status

QWEN = "qwen25-7b-grpo"
FULL = "node-verified (real shape, random init, 2 x H200)"


def write(folder: Path, file: str = f"{QWEN}.2xh200", **fields) -> Path:
    """A node record as record.py writes it (the fields status.py reads), a passing full-batch run unless changed."""
    record = {"recipe": f"{QWEN}/v1", "shape": "Qwen/Qwen2.5-7B-Instruct", "layers": None, "gpus": 2, "args": [],
              "hardware": "2xh200", "rc": 0, "passed": True, "failures": [], **fields}
    path = folder / f"{file}.json"
    path.write_text(json.dumps(record))
    return path


def earned(folder: Path, spec: str = QWEN) -> str | None:
    return status.earned(catalog.parse(spec), folder)


def test_a_passing_full_batch_record_earns_node_verified(tmp_path):
    write(tmp_path)
    assert earned(tmp_path) == FULL
    assert catalog.NODE_VERIFIED.fullmatch(FULL)


def test_a_passing_record_with_args_earns_nothing(tmp_path):
    write(tmp_path, args=["data.train_batch_size=128", "actor_rollout_ref.actor.ppo_mini_batch_size=32"])
    assert earned(tmp_path) is None


def test_a_record_without_args_is_not_known_to_run_the_recipes_batch(tmp_path):
    path = write(tmp_path)
    record = json.loads(path.read_text())
    del record["args"]
    path.write_text(json.dumps(record))
    assert earned(tmp_path) is None


def test_a_failing_record_earns_nothing(tmp_path):
    write(tmp_path, rc=0, passed=False, failures=["peak_memory_gib 61.21 is -23.9% off the planner's 80.44 GiB"])
    assert earned(tmp_path) is None


def test_no_record_earns_nothing(tmp_path):
    assert earned(tmp_path) is None


def test_only_the_recipes_own_records_count(tmp_path):
    """A variant's record earns nothing for the base recipe, nor the base's for the variant, nor v1's for another
    version; the metrics beside a record are not records."""
    write(tmp_path, file=f"{QWEN}-megatron.2xh200", recipe=f"{QWEN}/v1:megatron")
    (tmp_path / f"{QWEN}.2xh200.metrics.jsonl").write_text("{}\n")
    assert earned(tmp_path) is None
    assert earned(tmp_path, f"{QWEN}:megatron") == FULL
    write(tmp_path, recipe=f"{QWEN}/v2")
    assert earned(tmp_path) is None


def test_a_run_at_fewer_layers_says_so(tmp_path):
    write(tmp_path, layers=23)
    said = earned(tmp_path)
    assert said == "node-verified (real shape, random init, 2 x H200, 23 of 28 layers)"
    assert catalog.NODE_VERIFIED.fullmatch(said)


def test_the_deepest_passing_run_wins_then_the_fewest_gpus(tmp_path):
    write(tmp_path, layers=23)
    write(tmp_path, file=f"{QWEN}.8xh100", gpus=8, hardware="8xh100")
    write(tmp_path, file=f"{QWEN}.4xh100", gpus=4, hardware="4xh100")
    write(tmp_path, file=f"{QWEN}.4xh200", gpus=4, hardware="4xh200", passed=False)
    assert earned(tmp_path) == "node-verified (real shape, random init, 4 x H100)"


def test_a_card_may_say_node_verified_and_nothing_like_it(scratch_root):
    card = scratch_root / "recipes" / QWEN / "v1" / catalog.CARD
    text = card.read_text()
    for said in (FULL, "node-verified (real shape, random init, 2 x H200, 23 of 28 layers)"):
        card.write_text(text.replace("status: smoke-verified (tiny model, 1 GPU)", f"status: {said}"))
        assert catalog.load_card(QWEN, "v1")["status"] == said
    card.write_text(text.replace("status: smoke-verified (tiny model, 1 GPU)", "status: node-verified (2 GPUs)"))
    with pytest.raises(RecipeError, match="node-verified"):
        catalog.load_card(QWEN, "v1")


@pytest.mark.parametrize("recipe", catalog.all_recipes(), ids=lambda recipe: recipe.label)
def test_each_card_says_what_its_committed_node_records_earn(recipe):
    """A card (or a variant's own entry) says node-verified only as its committed records earn it, and a card still
    below it (unverified, smoke-verified) claims a record that earns it."""
    said, earned_now = recipe.own_card_value("status"), status.earned(recipe)
    if said and catalog.NODE_VERIFIED.fullmatch(said):
        assert said == earned_now, f"{recipe.label}: the card says {said!r}, its records in results/node earn " \
                                   f"{earned_now!r}"
    elif said in ("unverified", *(s for s in catalog.CARD_STATUSES if s.startswith("smoke-verified"))):
        assert earned_now is None, f"{recipe.label}: results/node earns {earned_now!r}; the card says {said!r}"

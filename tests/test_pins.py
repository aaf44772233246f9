"""Pinned configs (verl_recipes/pins.py): every published version and variant still composes to its committed
resolved config, and a change under it is named key by key."""

import pytest
import yaml

from verl_recipes import catalog, cli, pins


@pytest.mark.slow
def test_every_published_recipe_composes_to_its_pin():
    drifted = {recipe.label: pins.drift(recipe) for recipe in catalog.all_recipes() if recipe.published}
    assert not any(drifted.values()), {label: d for label, d in drifted.items() if d}


@pytest.mark.slow
def test_a_retuned_fragment_is_named_in_every_recipe_it_moves(scratch_root, capsys):
    fragment = scratch_root / "configs/rollout/vllm.yaml"
    fragment.write_text(fragment.read_text().replace("gpu_memory_utilization: 0.7", "gpu_memory_utilization: 0.65"))
    assert cli.main(["check", "qwen25-7b-grpo"]) == 1
    out = capsys.readouterr().out
    assert "composition no longer reproduces recipes/qwen25-7b-grpo/v1/resolved/recipe.yaml (1 key(s) moved)" in out
    assert "actor_rollout_ref.rollout.gpu_memory_utilization: 0.7 -> 0.65" in out
    # every recipe on that fragment drifts; `make pin` accepts the change and check passes again
    # (two of them, a variant and another recipe: composing every recipe anew was most of this test's 30 s)
    others = [r for r in catalog.all_recipes() if r.label in ("qwen25-7b-grpo/v1:megatron", "qwen3-vl-8b-geo3k-dapo/v1")]
    assert len(others) == 2 and all(pins.drift(r) for r in others)
    assert cli.main(["pin", "qwen25-7b-grpo"]) == 0
    assert not any(pins.drift(r) for r in catalog.all_recipes() if r.name == "qwen25-7b-grpo")
    pinned = yaml.safe_load(pins.pin_file(catalog.get("qwen25-7b-grpo")).read_text())
    assert pinned["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] == 0.65


@pytest.mark.slow
def test_a_parent_change_shows_in_the_published_child_made_by_cp(scratch_root, capsys):
    assert cli.main(["cp", "qwen25-7b-grpo", "my-grpo"]) == 0
    assert not pins.pin_file(catalog.get("my-grpo")).exists()  # unpublished: it follows its parent, unpinned
    assert cli.main(["publish", "my-grpo"]) == 0
    assert pins.drift(catalog.get("my-grpo")) == []
    parent = scratch_root / "recipes/qwen25-7b-grpo/v1/recipe.yaml"
    parent.write_text(parent.read_text().replace("lr: 1.0e-6", "lr: 2.0e-6"))
    [message] = pins.drift(catalog.get("my-grpo"))
    assert "actor_rollout_ref.actor.optim.lr: 1e-06 -> 2e-06" in message


def test_a_missing_pin_is_named(scratch_root):
    recipe = catalog.get("qwen3-30b-a3b-grpo")
    pins.pin_file(recipe).unlink()
    [message] = pins.drift(recipe)
    assert message.startswith("recipes/qwen3-30b-a3b-grpo/v1/resolved/recipe.yaml is missing") and "make pin" in message


@pytest.mark.slow
def test_make_cp_refuses_names_of_make_targets(scratch_root, capsys):
    for name in ("test", "check", "lint", "my-grpo-check", "my-grpo-smoke"):
        assert cli.main(["cp", "qwen25-7b-grpo", name]) == 2
        assert "clashes with a make target" in capsys.readouterr().err
    assert not (scratch_root / "recipes/test").exists()

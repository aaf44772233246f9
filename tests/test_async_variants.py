"""The qwen25-7b-grpo async variants compose to what verl's entry points expect, and `make check` proves them.

- async: the sync recipe plus configs/async/* must equal verl's fully_async_ppo_trainer keys with our values
  (a variant cannot compose over fully_async_ppo_trainer itself: Hydra refuses ppo_trainer twice).
- separate_async: the sync recipe with only the keys our async files set changed.
"""

import copy
from functools import cache
from pathlib import Path

import pytest
from composed import composed
from omegaconf import OmegaConf

from verl_recipes import catalog
from verl_recipes.check.async_training import async_errors
from verl_recipes.check.recipe import check
from verl_recipes.compose import compose, compose_verl_base, flatten, own_files
from verl_recipes.entrypoints import FULLY_ASYNC, MAIN_PPO

RECIPE = ("qwen25-7b-grpo", "v1")
# Our async files in Hydra merge order (later wins), for each variant.
ASYNC_FILES = {
    "async": ["configs/async/standalone_rollout", "configs/async/fully_async", "configs/async/split_4_4",
              "recipes/qwen25-7b-grpo/v1/async"],
    "separate_async": ["configs/async/standalone_rollout", "configs/async/separate_async", "configs/async/split_4_4",
                       "recipes/qwen25-7b-grpo/v1/separate_async"],
}
ENTRYPOINTS = {"async": FULLY_ASYNC, "separate_async": MAIN_PPO}


def raw(variant):
    """Flattened config with interpolations kept, as the schema check compares it."""
    return flatten(composed(RECIPE[0], variant, version=RECIPE[1], resolve=False))


@cache
def verl_base(name):
    return flatten(compose_verl_base(name, "dp"))


def set_by(files):
    out = {}
    for name in files:
        values = OmegaConf.to_container(OmegaConf.load(catalog.root() / f"{name}.yaml"))
        values.pop("defaults", None)
        out.update(flatten(values))
    return out


@pytest.mark.parametrize("variant", ["async", "separate_async"])
def test_async_files_listed_are_the_ones_composed(variant):
    composed = own_files(f"recipes/{RECIPE[0]}/{RECIPE[1]}/{variant}")
    recipe = own_files(f"recipes/{RECIPE[0]}/{RECIPE[1]}/recipe")
    assert {p for p in composed if p not in recipe} == {catalog.root() / f"{f}.yaml" for f in ASYNC_FILES[variant]}


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["async", "separate_async"])
def test_variant_is_the_sync_recipe_plus_async_files(variant):
    composed, ours, sync_keys = raw(variant), set_by(ASYNC_FILES[variant]), raw(None)
    for key, value in composed.items():
        expected = ours[key] if key in ours else sync_keys[key]
        assert value == expected, key
    base = "fully_async_ppo_trainer" if variant == "async" else "ppo_trainer"
    assert set(composed) == set(sync_keys) | set(verl_base(base)) | set(ours)


def test_async_sets_every_key_fully_async_ppo_trainer_adds_or_changes():
    sync_base, async_base = verl_base("ppo_trainer"), verl_base("fully_async_ppo_trainer")
    specific = {k for k, v in async_base.items() if sync_base.get(k, object()) != v}
    assert specific and specific <= set(set_by(ASYNC_FILES["async"]))


def test_async_keeps_verl_fully_async_choices_for_weights_and_log_probs():
    composed, verl = raw("async"), verl_base("fully_async_ppo_trainer")
    for key in ("actor_rollout_ref.rollout.checkpoint_engine.backend", "algorithm.rollout_correction.bypass_mode",
                "actor_rollout_ref.actor.use_rollout_log_probs", "data.gen_batch_size", "async_training.partial_rollout"):
        assert composed[key] == verl[key], key
    # the rollouter's pool follows the split fragment (fully_async_main.py:235 copies it the other way)
    assert composed["rollout.nnodes"] == "${actor_rollout_ref.rollout.nnodes}"


@pytest.mark.slow
@pytest.mark.parametrize("variant,args", [
    ("async", ""), ("separate_async", ""),
    ("async", "configs/async=split_8_8"), ("separate_async", "configs/async=split_64_64"),
    ("async", "+configs/smoke=node_fully_async"), ("separate_async", "+configs/smoke=node_separate_async"),
])
def test_variants_splits_and_smoke_overlays_pass_async_rules(variant, args):
    cfg = compose(catalog.Recipe(*RECIPE, variant), args, naming=False)
    assert async_errors(cfg, ENTRYPOINTS[variant], 8) == []


@pytest.mark.slow
def test_generic_node_smoke_overlay_breaks_fully_async():
    # Why the async variants need their own smoke overlays: the node overlay's train_batch_size=32.
    cfg = compose(catalog.Recipe(*RECIPE, "async"), "+configs/smoke=node", naming=False)
    assert any("data.train_batch_size must be 0" in e for e in async_errors(cfg, FULLY_ASYNC, 8))


@pytest.mark.slow
@pytest.mark.parametrize("variant,args", [
    ("async", ""), ("separate_async", ""),
    ("async", "+configs/smoke=node_fully_async actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct"),
])
def test_make_check_proves_the_variants(variant, args):
    """The whole `make check` (schema of the entry point's verl config, typed configs, validate_config, planner),
    with the card entry the variant needs (entrypoint for async)."""
    card = copy.deepcopy(catalog.load_card(*RECIPE))
    entry = {"entrypoint": ENTRYPOINTS[variant].module} if variant == "async" else {}
    card.setdefault("variants", {}).setdefault(variant, {}).update(entry)
    errors = check(catalog.Recipe(*RECIPE, variant, card), args)
    assert errors == []


@pytest.mark.slow
def test_separate_async_without_hybrid_engine_needs_the_log_level_workaround():
    """verl 0.9.1 logs with logger.info(..., flush=True) on that path (a TypeError at INFO; found on 2 H200s)."""
    import verl

    source = Path(verl.__file__).parent / "trainer/ppo/v1/trainer_separate_async.py"
    assert "flush=True" in source.read_text().splitlines()[183]  # the bug the workaround is for is still there
    recipe = catalog.get("qwen25-7b-grpo", variant="separate_async")
    assert check(recipe) == []
    errors = check(recipe, ["ray_kwargs.ray_init.runtime_env.env_vars.VERL_LOGGING_LEVEL=INFO"])
    assert any("VERL_LOGGING_LEVEL=WARN" in e and "trainer_separate_async.py:181" in e for e in errors), errors

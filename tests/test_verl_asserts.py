"""The inventory of verl 0.9.1's configuration-dependent asserts (verl_recipes/check/verl_asserts.yaml): it matches the
installed verl, every entry has a rule or a reason, and every rule catches a real recipe broken in exactly that way,
naming the key."""

import importlib
import re

import pytest

from verl_recipes import catalog
from verl_recipes.catalog import REPO
from verl_recipes.check import verl_asserts
from verl_recipes.check.recipe import check

ENTRIES = verl_asserts.load()
RULES = sorted({e["rule"] for e in ENTRIES if e.get("rule")})
# rule -> (recipe, variant, overrides that break exactly its condition, key the message must name)
BREAKS = {
    "verl_recipes.check.typed:typed_configs":
        ("qwen25-7b-grpo", None, ["actor_rollout_ref.actor.loss_agg_mode=per-sample"], "loss_agg_mode"),
    "verl_recipes.check.async_training:async_errors":
        ("qwen25-7b-grpo", "separate_async", ["trainer.v1.separate_async.parameter_sync_step=3"],
         "trainer.v1.separate_async.parameter_sync_step"),
    "verl_recipes.check.layout:layout_errors":
        ("qwen25-7b-grpo", None, ["actor_rollout_ref.rollout.tensor_model_parallel_size=3"],
         "actor_rollout_ref.rollout.tensor_model_parallel_size"),
    "verl_recipes.check.arithmetic:token_budgets":
        ("qwen25-7b-grpo", None, ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1000"],
         "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"),
    "verl_recipes.check.startup:dynamic_batch_errors":
        ("qwen25-7b-grpo", None, ["data.train_batch_size=1001"], "data.train_batch_size"),
    "verl_recipes.check.startup:worker_batching_errors":
        ("qwen25-7b-grpo", None, ["actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=false"],
         "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz"),
    "verl_recipes.check.startup:model_length_errors":
        ("qwen25-7b-grpo", None, ["actor_rollout_ref.rollout.max_model_len=65536"], "actor_rollout_ref.rollout.max_model_len"),
    "verl_recipes.check.startup:sequence_parallel_errors":
        ("qwen25-7b-grpo", None, ["actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",
                                  "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size=2",
                                  "actor_rollout_ref.model.use_remove_padding=false"],
         "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"),
    "verl_recipes.check.startup:optimizer_errors":
        ("qwen25-7b-grpo", None, ["actor_rollout_ref.actor.optim.clip_grad=null"], "actor_rollout_ref.actor.optim.clip_grad"),
    "verl_recipes.check.startup:v1_trainer_errors":
        ("qwen25-7b-grpo", None, ["+data.gen_batch_size=3000"], "data.gen_batch_size"),
    "verl_recipes.check.startup:reward_model_errors":
        ("deepeyes-qwen25-vl-7b", "judge", ["reward.reward_model.rollout.skip_tokenizer_init=true"],
         "reward.reward_model.rollout.skip_tokenizer_init"),
    "verl_recipes.check.startup:megatron_bridge_errors":
        ("qwen25-7b-grpo", "megatron", ["actor_rollout_ref.actor.megatron.use_mbridge=false"],
         "actor_rollout_ref.actor.megatron.use_mbridge"),
}
# rules that act at launch rather than in `make check`, with the test that breaks them
TESTED_ELSEWHERE = {
    "verl_recipes.resume:decide": "tests/test_resume.py",
    "verl_recipes.check.preflight:profiling_preflight": "tests/test_profiling.py",
}


@pytest.mark.slow
def test_inventory_matches_the_installed_verl():
    assert verl_asserts.differences(ENTRIES, verl_asserts.extract()) == []


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["where"] for e in ENTRIES])
def test_every_listed_assert_has_a_rule_or_a_reason(entry):
    assert bool(entry.get("rule")) != bool(entry.get("reason")), f"{entry['where']}: give exactly one of rule, reason"
    if entry.get("rule"):
        module, name = entry["rule"].split(":")
        assert callable(getattr(importlib.import_module(module), name))


def test_every_rule_has_a_test_that_breaks_it():
    untested = [r for r in RULES if r not in BREAKS and r not in TESTED_ELSEWHERE]
    assert not untested, f"rules without a breaking test: {untested}"
    for path in TESTED_ELSEWHERE.values():
        assert (REPO / path).is_file()


@pytest.mark.slow
@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_rule_catches_its_break_and_names_the_key(rule):
    name, variant, overrides, key = BREAKS[rule]
    recipe = catalog.get(name, variant=variant)
    errors = check(recipe, overrides)
    assert any(key in e for e in errors), errors
    named = [e for e in errors if key in e]
    assert len(named) == len({e for e in named}), "one message per fault"


def test_readme_states_the_inventory_counts():
    counts = verl_asserts.counts()
    text = (REPO / "README.md").read_text()
    match = re.search(r"(\d+) configuration-dependent asserts in verl 0\.9\.1: (\d+) checked before start-up, (\d+) not", text)
    assert match, "README: state the inventory counts"
    assert tuple(map(int, match.groups())) == (counts["total"], counts["checked"], counts["not_checkable"])


@pytest.mark.slow
@pytest.mark.parametrize("overrides, key", [
    (["actor_rollout_ref.actor.ppo_mini_batch_size=2000"], "actor_rollout_ref.actor.ppo_mini_batch_size"),
    (["trainer.n_gpus_per_node=3"], "trainer.n_gpus_per_node"),
    (["data.train_batch_size=7"], "data.train_batch_size"),
    (["actor_rollout_ref.rollout.tensor_model_parallel_size=16"], "actor_rollout_ref.rollout.tensor_model_parallel_size"),
])
def test_impossible_batch_and_gpu_combinations_fail_naming_the_key(overrides, key):
    errors = check(catalog.get("qwen25-7b-grpo"), overrides)
    assert errors and any(key in e for e in errors), errors
    assert not any("memory" in e.lower() and key not in e for e in errors), "a memory verdict instead of the key"


def test_a_section_is_built_once_per_content_and_its_fault_is_reported_every_time():
    """check/typed.py builds the sections that read nothing else once per content in a process: the same content
    gives the same answer without a second build, and other content is built."""
    import dataclasses

    from omegaconf import OmegaConf

    from verl_recipes.check import typed

    built = []

    @dataclasses.dataclass
    class Section:
        n: int = 0

        def __post_init__(self):
            built.append(self.n)
            if self.n < 0:
                raise ValueError(f"n must be >= 0, got {self.n}")

    for _ in range(2):
        assert typed._built(OmegaConf.create({"n": 1}), Section) is None
        assert typed._built(OmegaConf.create({"n": -1}), Section) == "n must be >= 0, got -1"
    assert built == [1, -1]
    assert "actor_rollout_ref.model" in typed.READS_FILES  # HFModelConfig reads the model's files: built every time

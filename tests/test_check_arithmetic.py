"""Batch and token arithmetic (verl_recipes/check/arithmetic.py) on a composed recipe: one message per fault,
naming the key."""

import pytest

from verl_recipes import catalog
from verl_recipes.check.arithmetic import arithmetic_errors
from verl_recipes.compose import compose

QWEN = catalog.get("qwen25-7b-grpo")  # prompt 1024 + response 2048 = 3072 tokens


def test_token_budget_must_hold_the_longest_sequence():
    (error,) = arithmetic_errors(compose(QWEN, ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=2048"]))
    assert error.startswith("'actor_rollout_ref.actor.ppo_max_token_len_per_gpu' = 2048 (x SP/CP 1)"), error
    # the budget counts per Ulysses rank: 2048 x SP 2 holds a 3072-token sequence
    assert arithmetic_errors(compose(QWEN, ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=2048",
                                            "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",
                                            "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size=2"])) == []


@pytest.mark.slow
def test_fixed_micro_batches_need_a_size():
    (error,) = arithmetic_errors(compose(QWEN, ["actor_rollout_ref.actor.use_dynamic_bsz=false"]))
    assert "'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu'" in error
    assert arithmetic_errors(compose(QWEN, ["actor_rollout_ref.actor.use_dynamic_bsz=false",
                                            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"])) == []

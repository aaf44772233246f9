"""verl_recipes/check/async_training.py: every invariant verl 0.9.1 asserts for async training is caught before launch.

Each case breaks one key of a really composed variant (qwen25-7b-grpo async / separate_async) and expects the
error to name the invariant and the key to change; the unbroken variants pass.
"""

import copy

import pytest
from omegaconf import OmegaConf, open_dict

from verl_recipes import catalog
from verl_recipes.check import async_training
from verl_recipes.compose import compose
from verl_recipes.entrypoints import FULLY_ASYNC, MAIN_PPO, nodes_needed

NODE_GPUS = 8


def async_errors(cfg, entry):
    return async_training.async_errors(cfg, entry, NODE_GPUS)


@pytest.fixture(scope="module")
def composed():
    def one(variant, args=""):
        return compose(catalog.Recipe("qwen25-7b-grpo", "v1", variant), args, naming=False)

    return {"async": one("async"), "separate_async": one("separate_async"), "sync": one(None)}


def broken(cfg, changes: dict):
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        for key, value in changes.items():
            if value is DELETE:
                parent, _, leaf = key.rpartition(".")
                (OmegaConf.select(cfg, parent) if parent else cfg).pop(leaf)
            else:
                OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


DELETE = object()

FULLY_ASYNC_CASES = [
    ({"actor_rollout_ref.hybrid_engine": True}, "actor_rollout_ref.hybrid_engine must be False"),
    ({"data.train_batch_size": 1024}, "data.train_batch_size must be 0"),
    ({"data.gen_batch_size": 4}, "data.gen_batch_size must be 1"),
    ({"actor_rollout_ref.rollout.calculate_log_probs": False}, "actor_rollout_ref.rollout.calculate_log_probs must be True"),
    ({"actor_rollout_ref.rollout.mode": "sync"}, "actor_rollout_ref.rollout.mode must be async"),
    ({"async_training.staleness_threshold": -0.1}, "async_training.staleness_threshold must be >= 0"),
    ({"async_training.trigger_parameter_sync_step": 0}, "async_training.trigger_parameter_sync_step must be >= 1"),
    ({"async_training.require_batches": 0}, "async_training.require_batches must be >= 1"),
    ({"actor_rollout_ref.rollout.checkpoint_engine.backend": "naive"}, "checkpoint_engine.backend must not be 'naive'"),
    ({"reward.reward_model.enable": True}, "set reward.reward_model.enable_resource_pool=true"),
    ({"rollout.nnodes": 2}, "rollout.nnodes (2) differs from actor_rollout_ref.rollout.nnodes (1)"),
    ({"rollout.n_gpus_per_node": 2}, "rollout.n_gpus_per_node (2) differs"),
    ({"rollout.total_rollout_steps": 100}, "rollout.total_rollout_steps = 100 prompts is less than one weight version"),
    ({"trainer.test_freq": 0}, "trainer.test_freq must not be 0"),
    ({"algorithm.filter_groups.enable": True}, "algorithm.filter_groups.enable is ignored by fully_async_main"),
    ({"async_training": DELETE}, "needs the async_training and rollout blocks"),
]


@pytest.mark.slow
@pytest.mark.parametrize("changes,expected", FULLY_ASYNC_CASES, ids=[next(iter(c)) for c, _ in FULLY_ASYNC_CASES])
def test_fully_async_invariant_rejected(composed, changes, expected):
    errors = async_errors(broken(composed["async"], changes), FULLY_ASYNC)
    assert any(expected in e for e in errors), errors
    assert all(e.startswith(("fully async: ", "GPU split: ")) for e in errors), errors


SEPARATE_ASYNC_CASES = [
    ({"trainer.v1.separate_async.parameter_sync_step": 2}, "set trainer.v1.separate_async.parameter_sync_step=4"),
    ({"data.train_batch_size": 1000}, "make data.train_batch_size a multiple of actor_rollout_ref.actor.ppo_mini_batch_size"),
    ({"trainer.use_v1": False}, "set trainer.use_v1=true"),
    ({"actor_rollout_ref.rollout.checkpoint_engine.backend": "naive"}, "checkpoint_engine.backend must not be 'naive'"),
    ({"reward.reward_model.enable": True}, "set reward.reward_model.enable_resource_pool=true"),
    ({"actor_rollout_ref.rollout.calculate_log_probs": False}, "needs actor_rollout_ref.rollout.calculate_log_probs=true"),
    ({"actor_rollout_ref.hybrid_engine": True, "trainer.v1.separate_async.hybrid_rollout.enable_switch": True,
      "actor_rollout_ref.rollout.disaggregation.enabled": True}, "cannot run with actor_rollout_ref.rollout.disaggregation"),
]


@pytest.mark.parametrize("changes,expected", SEPARATE_ASYNC_CASES, ids=[next(iter(c)) for c, _ in SEPARATE_ASYNC_CASES])
def test_separate_async_invariant_rejected(composed, changes, expected):
    errors = async_errors(broken(composed["separate_async"], changes), MAIN_PPO)
    assert any(expected in e for e in errors), errors
    assert all(e.startswith(("separate_async: ", "GPU split: ")) for e in errors), errors


def test_batch_invariant_message_names_all_three_keys(composed):
    errors = async_errors(broken(composed["separate_async"], {"actor_rollout_ref.actor.ppo_mini_batch_size": 128}), MAIN_PPO)
    assert errors == ["separate_async: batch invariant: data.train_batch_size (1024) must equal "
                      "trainer.v1.separate_async.parameter_sync_step (4) x actor_rollout_ref.actor.ppo_mini_batch_size "
                      "(128) (asserted, trainer/ppo/v1/trainer_separate_async.py:59); "
                      "set trainer.v1.separate_async.parameter_sync_step=8"]


POOL = "actor_rollout_ref.rollout"
TOPOLOGY_CASES = [  # on the separate_async variant, whose rollout pool is actor_rollout_ref.rollout.*
    ({"trainer.n_gpus_per_node": 0}, "trainer pool is empty"),
    ({f"{POOL}.nnodes": 0}, "rollout pool is empty"),
    ({f"{POOL}.n_gpus_per_node": 0}, "rollout pool is empty"),
    ({"trainer.n_gpus_per_node": 12}, "trainer pool asks 12 GPUs per node but a node has 8"),
    ({f"{POOL}.n_gpus_per_node": 16}, "rollout pool asks 16 GPUs per node"),
    ({f"{POOL}.nnodes": 2}, "nnodes inconsistent"),  # 4 + 4 share a node, so both pools need the same nnodes
    ({f"{POOL}.tensor_model_parallel_size": 3}, "does not hold whole engines of 3 GPUs"),
    ({f"{POOL}.tensor_model_parallel_size": 8}, "does not hold whole engines of 8 GPUs"),  # 4 GPUs: zero engines
]


@pytest.mark.parametrize("changes,expected", TOPOLOGY_CASES, ids=[f"{k}={v}" for c, _ in TOPOLOGY_CASES for k, v in c.items()])
def test_gpu_split_rejected(composed, changes, expected):
    errors = async_errors(broken(composed["separate_async"], changes), MAIN_PPO)
    assert any(e.startswith("GPU split: ") and expected in e for e in errors), errors


@pytest.mark.parametrize("trainer,rollout,tp,nodes", [
    ((1, 4), (1, 4), 1, 1),  # one node shared 4 + 4
    ((2, 4), (2, 4), 4, 2),  # two nodes shared 4 + 4, engines of 4
    ((1, 8), (1, 8), 2, 2),  # one training node, one rollout node
    ((2, 8), (1, 8), 8, 3),  # uneven whole-node pools are fine
    ((1, 8), (2, 4), 8, 3),  # an engine may span two rollout nodes of 4 GPUs
])
def test_gpu_split_accepted_and_counted(composed, trainer, rollout, tp, nodes):
    cfg = broken(composed["separate_async"], {
        "trainer.nnodes": trainer[0], "trainer.n_gpus_per_node": trainer[1],
        f"{POOL}.nnodes": rollout[0], f"{POOL}.n_gpus_per_node": rollout[1], f"{POOL}.tensor_model_parallel_size": tp})
    assert async_errors(cfg, MAIN_PPO) == []
    assert nodes_needed(cfg, MAIN_PPO, NODE_GPUS) == nodes


def test_fully_async_reads_its_rollout_pool_from_rollout_keys(composed):
    # fully_async_main copies rollout.* over actor_rollout_ref.rollout.*: the split check must use rollout.*.
    cfg = broken(composed["async"], {"rollout.n_gpus_per_node": 0, f"{POOL}.n_gpus_per_node": 0})
    assert any(e.startswith("GPU split: rollout pool is empty (rollout.{nnodes,n_gpus_per_node}") for e in async_errors(cfg, FULLY_ASYNC))


def test_variants_and_sync_recipe_pass(composed):
    assert async_errors(composed["async"], FULLY_ASYNC) == []
    assert async_errors(composed["separate_async"], MAIN_PPO) == []
    assert async_errors(composed["sync"], MAIN_PPO) == []


def test_hybrid_engine_off_outside_separate_async_rejected(composed):
    errors = async_errors(broken(composed["sync"], {"actor_rollout_ref.hybrid_engine": False}), MAIN_PPO)
    assert len(errors) == 1 and "honoured only by trainer.v1.trainer_mode=separate_async" in errors[0]


def test_fully_async_config_under_main_ppo_is_not_fully_async(composed):
    # The entry point decides: the same config launched by main_ppo is a sync V1 run with hybrid_engine=false.
    errors = async_errors(composed["async"], MAIN_PPO)
    assert len(errors) == 1 and "hybrid_engine=false" in errors[0]

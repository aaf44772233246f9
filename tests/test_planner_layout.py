"""Layout rules: each broken layout yields a message naming the rule and the keys to change."""

import pytest
from test_planner_hf_configs import QWEN2_5_1_5B, QWEN2_5_7B, QWEN3_8B, QWEN3_30B_A3B, QWEN3_235B_A22B

from verl_recipes.check.layout import fsdp_layout_errors, megatron_layout_errors, rollout_layout_errors
from verl_recipes.planner.megatron_memory import MegatronParallel as Parallel
from verl_recipes.planner.megatron_memory import Recompute
from verl_recipes.planner.model_shape import model_shape

QWEN1_5B = model_shape(QWEN2_5_1_5B)
QWEN7B = model_shape(QWEN2_5_7B)
QWEN8B = model_shape(QWEN3_8B)
QWEN30B = model_shape(QWEN3_30B_A3B)
QWEN235B = model_shape(QWEN3_235B_A22B)
MEGATRON = "actor_rollout_ref.actor.megatron"


@pytest.mark.parametrize(
    "shape, parallel, recompute, rule, key",
    [
        (QWEN7B, Parallel(8, tp=3), Recompute(), "TP×PP×CP divides the world size", "tensor,pipeline,context"),
        (QWEN7B, Parallel(12, tp=3), Recompute(), "attention heads divide by TP", "tensor_model_parallel_size"),
        (QWEN7B, Parallel(8, tp=8), Recompute(), "KV heads divide by TP", "tensor_model_parallel_size"),
        (QWEN7B, Parallel(8, tp=2, vpp=2), Recompute(), "virtual pipeline needs PP > 1", "virtual_pipeline"),
        (QWEN7B, Parallel(24, pp=3), Recompute(), "layers divide by PP×VPP", "num_layers_in_"),
        (QWEN7B, Parallel(8, pp=2, vpp=4), Recompute(), "layers divide by PP×VPP", "virtual_pipeline"),
        (
            QWEN7B,
            Parallel(8, pp=4, num_layers_in_first_pipeline_stage=5, num_layers_in_last_pipeline_stage=4),
            Recompute(),
            "remaining layers divide by middle stages × VPP",
            "num_layers_in_",
        ),
        (
            QWEN7B,
            Parallel(8, pp=4, vpp=2, num_layers_in_first_pipeline_stage=5),
            Recompute(),
            "first-stage layers are positive and divide by VPP",
            "num_layers_in_first_pipeline_stage",
        ),
        (
            QWEN7B,
            Parallel(4, pp=2, num_layers_in_first_pipeline_stage=14, num_layers_in_last_pipeline_stage=10),
            Recompute(),
            "remaining layers fill the middle stages",
            "num_layers_in_",
        ),
        (QWEN7B, Parallel(8, ep=2), Recompute(), "expert parallelism needs an MoE model", "expert_model_parallel_size"),
        (QWEN30B, Parallel(12, ep=3, etp=1), Recompute(), "EP divides the number of experts", "expert_model_parallel"),
        # verl's Qwen3-235B demo on 8 nodes: ETP unset means ETP = TP = 4, and 4×4×8 = 128 does not divide 64
        (
            QWEN235B,
            Parallel(64, tp=4, pp=8, ep=4, num_layers_in_first_pipeline_stage=11, num_layers_in_last_pipeline_stage=11),
            Recompute(),
            "ETP×EP×PP divides the world size",
            "expert_tensor_parallel_size",
        ),
        (QWEN30B, Parallel(8, tp=2, ep=4, etp=1, sequence_parallel=False), Recompute(), "needs sequence parallelism",
         "sequence_parallel"),
        (QWEN7B, Parallel(8, tp=2), Recompute("full"), "full recompute needs a method and a layer count",
         "recompute_method"),
        (QWEN7B, Parallel(8, tp=2), Recompute("partial"), "recompute granularity is selective or full",
         "recompute_granularity"),
        (QWEN7B, Parallel(8, tp=2), Recompute("selective", modules=("attention",)), "known to Megatron",
         "recompute_modules"),
    ],
)
def test_megatron_rule_broken(shape, parallel, recompute, rule, key):
    errors = megatron_layout_errors(shape, parallel, recompute)
    assert any(f"{rule}]" in error and key in error for error in errors), errors


@pytest.mark.parametrize(
    "shape, parallel, recompute",
    [
        (QWEN7B, Parallel(8, tp=2), Recompute()),
        (QWEN7B, Parallel(8, tp=4, pp=2, vpp=7), Recompute("selective", modules=("core_attn", "mlp"))),
        (QWEN7B, Parallel(16, tp=2, pp=4, num_layers_in_first_pipeline_stage=6, num_layers_in_last_pipeline_stage=6),
         Recompute("full", "block", 2)),
        (QWEN8B, Parallel(16, tp=8, cp=2), Recompute("full", "uniform", 1)),
        (QWEN30B, Parallel(16, tp=2, ep=8, etp=1), Recompute("selective", modules=("moe_act", "layernorm"))),
        (QWEN235B, Parallel(64, tp=4, pp=8, ep=4, etp=1, num_layers_in_first_pipeline_stage=11,
                            num_layers_in_last_pipeline_stage=11), Recompute("full", "uniform", 1)),
    ],
)
def test_megatron_valid_layouts(shape, parallel, recompute):
    assert megatron_layout_errors(shape, parallel, recompute) == []


@pytest.mark.parametrize(
    "shape, world, fsdp_size, ulysses, rule",
    [
        (QWEN7B, 8, 3, 1, "FSDP size divides the world size"),
        (QWEN1_5B, 12, -1, 3, "KV heads and Ulysses SP divide one another"),
        (QWEN7B, 8, -1, 8, "attention heads divide by Ulysses SP"),
        (QWEN8B, 6, -1, 4, "Ulysses SP divides the world size"),
    ],
)
def test_fsdp_rule_broken(shape, world, fsdp_size, ulysses, rule):
    (error,) = fsdp_layout_errors(shape, world, fsdp_size, ulysses)
    assert f"[{rule}]" in error and "actor_rollout_ref.actor.fsdp_config." in error


@pytest.mark.parametrize("world, fsdp_size, ulysses", [(8, -1, 1), (16, 8, 4), (8, 16, 2), (4, 4, 4)])
def test_fsdp_valid_layouts(world, fsdp_size, ulysses):
    assert fsdp_layout_errors(QWEN7B, world, fsdp_size, ulysses) == []


@pytest.mark.parametrize(
    "shape, gpus, per_node, tp, dp, ep, pp, rule",
    [
        (QWEN7B, 8, 8, 3, 1, 1, 1, "rollout TP×DP×PP tiles the GPUs"),
        (QWEN7B, 24, 8, 12, 1, 1, 1, "a multi-node rollout replica spans whole nodes"),
        (QWEN7B, 24, 6, 4, 3, 1, 1, "rollout TP divides GPUs per node when DP > 1"),
        (QWEN235B, 64, 8, 8, 1, 64, 1, "rollout EP equals TP×DP"),
        (QWEN7B, 8, 8, 2, 1, 1, 2, "no pipeline parallelism in verl 0.9.1"),
        (QWEN8B, 24, 8, 3, 1, 1, 1, "KV heads and rollout TP divide one another"),
    ],
)
def test_rollout_rule_broken(shape, gpus, per_node, tp, dp, ep, pp, rule):
    errors = rollout_layout_errors(shape, gpus, per_node, tp, dp, ep, pp)
    assert any(f"{rule}]" in error and "actor_rollout_ref.rollout." in error for error in errors), errors


@pytest.mark.parametrize(
    "shape, gpus, per_node, tp, dp, ep",
    [(QWEN7B, 8, 8, 2, 1, 1), (QWEN7B, 8, 8, 4, 2, 1), (QWEN8B, 8, 8, 8, 1, 1), (QWEN235B, 64, 8, 8, 8, 64),
     (QWEN30B, 16, 8, 16, 1, 1)],
)
def test_rollout_valid_layouts(shape, gpus, per_node, tp, dp, ep):
    assert rollout_layout_errors(shape, gpus, per_node, tp, dp, ep, 1) == []

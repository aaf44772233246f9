"""Megatron actor memory: the estimator's worked cases (mbridge memory_estimator: the 83.27 GB case of NVIDIA's talks) and its rules."""

import pytest
from test_planner_hf_configs import QWEN2_5_1_5B, QWEN2_5_7B, QWEN3_30B_A3B

from verl_recipes.planner.megatron_memory import (
    MegatronParallel,
    Recompute,
    layer_activations,
    layers_per_stage,
    megatron_memory,
    microbatches_in_flight,
)
from verl_recipes.planner.model_shape import model_shape

QWEN7B = model_shape(QWEN2_5_7B)
QWEN1_5B = model_shape(QWEN2_5_1_5B)
QWEN30B_A3B = model_shape(QWEN3_30B_A3B)


def gib_per_rank(estimate):
    return [
        (round(stage.weight_grad_optim_gib, 2), round(stage.activation_gib, 2), round(stage.total_gib, 2))
        for stage in estimate.stages
    ]


def test_seed_case_reproduced_exactly():
    """Qwen2.5-7B, 8 GPUs, TP2 PP1, SP, mbs 2, seq 10240, distributed optimizer, no recompute: 83.27 GB."""
    estimate = megatron_memory(QWEN7B, MegatronParallel(world_size=8, tp=2), micro_batch_size=2, seq_len=10240)
    (stage,) = estimate.stages
    assert stage.params == 3_807_709_696
    assert stage.activation_elements == 27_572_305_920
    assert gib_per_rank(estimate) == [(31.92, 51.36, 83.27)]
    assert round(stage.weight_grad_gib, 2) == 21.28


@pytest.mark.parametrize(
    "shape, parallel, micro_batch_size, seq_len, recompute, expected",
    [
        (QWEN7B, MegatronParallel(8, tp=4), 2, 10240, Recompute(), [(21.28, 25.82, 47.09)]),
        (
            QWEN7B,
            MegatronParallel(8, tp=2, pp=2),
            2,
            10240,
            Recompute(),
            [(21.28, 42.66, 63.93), (21.28, 30.03, 51.31)],  # rank 0 holds two micro-batches
        ),
        (QWEN7B, MegatronParallel(8, tp=2), 2, 10240, Recompute("full", "uniform", 1), [(31.92, 12.67, 44.58)]),
        # dynamic batching: one packed micro-batch of max_token_len 10240
        (QWEN7B, MegatronParallel(8, tp=2), 1, 10240, Recompute(), [(31.92, 25.68, 57.59)]),
        # Qwen2.5-1.5B on one GPU: no DP, so 18 B/param; the estimator counts the tied embedding twice
        (QWEN1_5B, MegatronParallel(1), 1, 16384, Recompute(), [(29.79, 45.29, 75.07)]),
    ],
    ids=["tp4-dp2", "tp2-pp2", "tp2-full-uniform", "dyn-bsz-10240", "1.5b-one-gpu"],
)
def test_other_worked_cases(shape, parallel, micro_batch_size, seq_len, recompute, expected):
    assert gib_per_rank(megatron_memory(shape, parallel, micro_batch_size, seq_len, recompute)) == expected


def test_peak_is_the_largest_pp_rank():
    estimate = megatron_memory(QWEN7B, MegatronParallel(8, tp=2, pp=2), 2, 10240)
    assert estimate.peak.pp_rank == 0


def test_without_distributed_optimizer_every_param_costs_18_bytes():
    stage = megatron_memory(QWEN7B, MegatronParallel(8, tp=2), 2, 10240, use_distributed_optimizer=False).stages[0]
    assert stage.weight_grad_optim_gib == pytest.approx(stage.params * 18 / 2**30)


def test_optimizer_cpu_offload_leaves_weights_and_grads():
    stage = megatron_memory(QWEN7B, MegatronParallel(8, tp=2), 2, 10240, optimizer_cpu_offload_fraction=1.0).stages[0]
    assert stage.weight_grad_optim_gib == pytest.approx(stage.weight_grad_gib)


def test_tied_embedding_counted_once_on_a_single_stage():
    untied = megatron_memory(QWEN1_5B, MegatronParallel(1), 1, 16384).stages[0]
    tied = megatron_memory(QWEN1_5B, MegatronParallel(1), 1, 16384, share_embeddings_and_output_weights=True).stages[0]
    assert untied.params - tied.params == 151936 * 1536


def test_fused_kernels_drop_the_logits_term():
    full = megatron_memory(QWEN7B, MegatronParallel(8, tp=2), 2, 10240).stages[0]
    fused = megatron_memory(QWEN7B, MegatronParallel(8, tp=2), 2, 10240, drop_logits=True).stages[0]
    assert full.activation_elements - fused.activation_elements == 3 * 20480 * 152064 / 2


def test_selective_recompute_drops_core_attention_and_named_modules():
    parallel = MegatronParallel(8, tp=2)
    none = megatron_memory(QWEN7B, parallel, 2, 10240).stages[0].activation_elements
    core = megatron_memory(QWEN7B, parallel, 2, 10240, Recompute("selective")).stages[0].activation_elements
    mlp = megatron_memory(QWEN7B, parallel, 2, 10240, Recompute("selective", modules=("core_attn", "mlp"))).stages[0]
    layers = 28
    assert none - core == layers * 2 * 20480 * (4 / 2) * 128  # core attention 2·t·(n_kv/TP)·d per layer
    assert core - mlp.activation_elements == layers * 1.5 * 20480 * 2 * 18944 / 2


def test_full_block_recompute_keeps_the_non_recomputed_layers():
    parallel = MegatronParallel(8, tp=2)
    uniform = megatron_memory(QWEN7B, parallel, 2, 10240, Recompute("full", "uniform", 1)).stages[0]
    all_block = megatron_memory(QWEN7B, parallel, 2, 10240, Recompute("full", "block", 28)).stages[0]
    half_block = megatron_memory(QWEN7B, parallel, 2, 10240, Recompute("full", "block", 14)).stages[0]
    per_layer = 812_646_400  # the estimator's per-layer count
    assert all_block.activation_elements == uniform.activation_elements
    assert half_block.activation_elements == pytest.approx(uniform.activation_elements + 14 * per_layer)


def test_context_parallel_divides_activations_and_doubles_core_attention():
    cp1 = megatron_memory(QWEN7B, MegatronParallel(8, tp=2), 1, 20480).stages[0]
    cp2 = megatron_memory(QWEN7B, MegatronParallel(8, tp=2, cp=2), 1, 20480).stages[0]
    core_attention = 28 * 2 * 20480 * 2 * 128
    assert cp2.activation_elements == pytest.approx((cp1.activation_elements + core_attention) / 2)


@pytest.mark.parametrize(
    "pp, vpp, first, last, expected",
    [
        (2, None, None, None, [14, 14]),
        (4, None, 4, 4, [4, 10, 10, 4]),
        (8, None, 11, 11, [11, 12, 12, 12, 12, 12, 12, 11]),
        (3, None, 10, None, [10, 9, 9]),
    ],
)
def test_layers_per_stage(pp, vpp, first, last, expected):
    parallel = MegatronParallel(pp * 2, pp=pp, vpp=vpp, num_layers_in_first_pipeline_stage=first,
                                num_layers_in_last_pipeline_stage=last)
    num_layers = 94 if pp == 8 else 28
    assert layers_per_stage(num_layers, parallel) == expected


@pytest.mark.parametrize(
    "pp, vpp, pp_rank, chunk, expected",
    [
        (4, None, 0, 0, 4),
        (4, None, 3, 0, 1),
        (4, 2, 0, 0, 7),  # PP + max(2·(PP − rank) − 1 − PP, 0)
        (4, 2, 0, 1, 4),  # min(2·(PP − rank) + 1, PP)
        (4, 2, 3, 0, 4),
        (4, 2, 3, 1, 3),
        (4, 3, 1, 1, 4),  # middle chunk: PP
    ],
)
def test_microbatches_in_flight(pp, vpp, pp_rank, chunk, expected):
    assert microbatches_in_flight(MegatronParallel(pp, pp=pp, vpp=vpp), pp_rank, chunk) == expected


def test_vpp_chunks_hold_embedding_first_and_logits_last():
    """PP2 VPP2, 7 layers per chunk: rank 0 holds (embedding + 7 layers)·3 + 7 layers·2 micro-batches,
    rank 1 holds 7 layers·2 + (7 layers + final norm)·2 + logits once."""
    parallel = MegatronParallel(8, tp=2, pp=2, vpp=2)
    tokens, hidden = 4096, 3584
    layer = layer_activations(QWEN7B, parallel, tokens, Recompute())
    first, last = megatron_memory(QWEN7B, parallel, 1, tokens).stages
    assert first.activation_elements == pytest.approx((tokens * hidden + 7 * layer) * 3 + 7 * layer * 2)
    logits = 3 * tokens * 152064 / 2
    assert last.activation_elements == pytest.approx(7 * layer * 2 + (7 * layer + tokens * hidden) * 2 + logits)
    assert last.params - first.params == hidden  # same layers and vocabulary shard; the last adds the final norm


def test_moe_expert_params_use_expert_data_parallel_bytes():
    """Qwen3-30B-A3B, 16 GPUs, TP2 EP8 ETP1: experts shard the optimizer over 16/(1·8·1) = 2 ranks."""
    parallel = MegatronParallel(16, tp=2, ep=8, etp=1)
    stage = megatron_memory(QWEN30B_A3B, parallel, 1, 8192).stages[0]
    experts = 48 * (128 / 8) * 3 * 2048 * 768
    dense = stage.params - experts
    assert stage.weight_grad_optim_gib == pytest.approx((dense * (6 + 12 / 8) + experts * (6 + 12 / 2)) / 2**30)


def test_moe_selective_recompute_of_moe_and_moe_act():
    parallel = MegatronParallel(16, tp=2, ep=8, etp=1)
    none = megatron_memory(QWEN30B_A3B, parallel, 1, 8192).stages[0].activation_elements
    moe_act = megatron_memory(QWEN30B_A3B, parallel, 1, 8192, Recompute("selective", modules=("moe_act",))).stages[0]
    moe = megatron_memory(QWEN30B_A3B, parallel, 1, 8192, Recompute("selective", modules=("moe",))).stages[0]
    assert none > moe_act.activation_elements > moe.activation_elements
    t_moe = 8192 / 2  # t_sp · ETP
    assert moe_act.activation_elements - moe.activation_elements == pytest.approx(48 * (2 + 8) * t_moe * 2048)

"""Rollout memory (vLLM, SGLang): KV bytes per token (2 x layers x KV heads x head_dim x 2 bytes), weights, capacity."""

import pytest
from test_planner_hf_configs import QWEN2_5_1_5B, QWEN2_5_7B, QWEN2_5_VL_7B, QWEN3_8B, QWEN3_30B_A3B, QWEN3_235B_A22B

from verl_recipes.planner.model_shape import hf_total_params, model_shape
from verl_recipes.planner.rollout_memory import (
    SGLANG_GRAPHS_GIB,
    VLLM_RESERVE_GIB,
    kv_bytes_per_token,
    rollout_memory,
    rollout_weight_params,
)

GIB = 2**30


@pytest.mark.parametrize(
    "hf_config, tp, expected",
    [
        (QWEN2_5_1_5B, 1, 28_672),
        (QWEN2_5_7B, 1, 57_344),
        (QWEN3_8B, 1, 147_456),
        (QWEN3_30B_A3B, 1, 98_304),
        (QWEN3_235B_A22B, 1, 192_512),
        (QWEN2_5_7B, 2, 57_344 / 2),
        (QWEN2_5_7B, 4, 57_344 / 4),
        (QWEN2_5_7B, 8, 57_344 / 4),  # TP 8 > 4 KV heads: vLLM keeps one replicated head per GPU
        (QWEN3_235B_A22B, 8, 192_512 / 4),
    ],
)
def test_kv_bytes_per_token(hf_config, tp, expected):
    assert kv_bytes_per_token(model_shape(hf_config), tp) == expected


@pytest.mark.parametrize("hf_config", [QWEN2_5_1_5B, QWEN2_5_7B, QWEN3_8B, QWEN3_30B_A3B, QWEN2_5_VL_7B])
def test_weights_at_tp1_are_the_whole_model(hf_config):
    shape = model_shape(hf_config)
    assert rollout_weight_params(shape, tp=1, ep=1) == hf_total_params(shape)


def test_weights_split_over_tp():
    shape = model_shape(QWEN2_5_7B)
    replicated = 28 * 2 * 3584 + 3584  # RMSNorms
    tp1, tp4 = rollout_weight_params(shape, tp=1, ep=1), rollout_weight_params(shape, tp=4, ep=1)
    assert tp4 == pytest.approx((tp1 - replicated) / 4 + replicated)


def test_expert_parallel_spreads_experts_over_tp_times_dp():
    shape = model_shape(QWEN3_235B_A22B)
    ep64 = rollout_weight_params(shape, tp=8, ep=64)
    tp8 = rollout_weight_params(shape, tp=8, ep=1)
    experts = 94 * 128 * 3 * 4096 * 1536
    assert tp8 - ep64 == pytest.approx(experts / 8 - experts / 64)


def test_kv_capacity_and_concurrency():
    """Qwen2.5-7B, TP 2, 0.6 of 80 GiB: (48 − 7.09 − reserve) GiB / 28 KiB per token."""
    shape = model_shape(QWEN2_5_7B)
    estimate = rollout_memory(shape, tp=2, ep=1, gpu_memory_gib=80, gpu_memory_utilization=0.6,
                              sequence_tokens=3072, max_num_seqs=256)
    weights = rollout_weight_params(shape, tp=2, ep=1) * 2
    assert estimate.weights_gib == pytest.approx(weights / GIB)
    assert estimate.kv_capacity_tokens == int((0.6 * 80 * GIB - weights - VLLM_RESERVE_GIB * GIB) // 28_672)
    assert estimate.concurrent_sequences == estimate.kv_capacity_tokens // 3072
    assert estimate.max_num_seqs_reachable


def test_sglang_takes_its_fraction_of_what_is_free_at_its_start_and_keeps_its_graphs_beside():
    """SGLang: 0.7 of (80 − the 10 GiB a trainer holds) for weights + KV, no reserve inside; its graphs beside the
    share and kept while it sleeps. vLLM with the same inputs takes 0.7 of the card whatever the trainer holds."""
    shape = model_shape(QWEN2_5_7B)
    args = dict(tp=1, ep=1, gpu_memory_gib=80, gpu_memory_utilization=0.7, sequence_tokens=3072, max_num_seqs=256)
    sglang = rollout_memory(shape, **args, engine="sglang", held_at_start_gib=10)
    weights = rollout_weight_params(shape, tp=1, ep=1) * 2
    assert sglang.pool_gib == 70 and sglang.share_gib == pytest.approx(0.7 * 70 + SGLANG_GRAPHS_GIB)
    assert sglang.kv_capacity_tokens == int((0.7 * 70 * GIB - weights) // 57_344)
    assert sglang.kept_asleep_gib == SGLANG_GRAPHS_GIB
    vllm = rollout_memory(shape, **args, held_at_start_gib=10)
    assert vllm.engine == "vllm" and vllm.pool_gib == 80 and vllm.share_gib == pytest.approx(56)
    with pytest.raises(ValueError, match="rollout engine 'trtllm'"):
        rollout_memory(shape, **args, engine="trtllm")


def test_max_num_seqs_out_of_reach_with_long_sequences():
    estimate = rollout_memory(model_shape(QWEN2_5_7B), tp=1, ep=1, gpu_memory_gib=80, gpu_memory_utilization=0.5,
                              sequence_tokens=16384, max_num_seqs=256)
    assert 0 < estimate.concurrent_sequences < 256
    assert not estimate.max_num_seqs_reachable


def test_no_room_left_for_kv_gives_zero_sequences():
    estimate = rollout_memory(model_shape(QWEN3_30B_A3B), tp=1, ep=1, gpu_memory_gib=80, gpu_memory_utilization=0.6,
                              sequence_tokens=4096, max_num_seqs=256)
    assert estimate.weights_gib > 0.6 * 80 - VLLM_RESERVE_GIB
    assert estimate.kv_capacity_tokens == 0 and estimate.concurrent_sequences == 0

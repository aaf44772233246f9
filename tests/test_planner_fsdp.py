"""FSDP actor memory terms (verl 0.9.1 FSDP engine: fp32 model, bf16 compute, fp32 AdamW)."""

import pytest
from test_planner_hf_configs import QWEN2_5_7B, QWEN2_5_VL_7B

from verl_recipes.planner import fsdp_memory
from verl_recipes.planner.fsdp_memory import (
    fsdp_activation_bytes_per_token,
    fsdp_breakdown,
    hf_layer_activation_bytes_per_token,
)
from verl_recipes.planner.model_shape import hf_total_params, model_shape

QWEN7B = model_shape(QWEN2_5_7B)
GIB = 2**30


def test_sharded_state_is_16_bytes_per_param_over_the_shard():
    parts = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=8192)
    params = 7_615_616_512 / 8
    assert parts.params_gib == pytest.approx(params * 4 / GIB)
    assert parts.grads_gib == pytest.approx(params * 4 / GIB)
    assert parts.optimizer_gib == pytest.approx(params * 8 / GIB)


def test_vision_tower_is_part_of_the_sharded_state():
    vl = model_shape(QWEN2_5_VL_7B)
    text = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=8192).params_gib
    assert fsdp_breakdown(vl, shard_size=8, tokens_per_gpu=8192).params_gib - text == pytest.approx(
        vl.vision_params * 4 / 8 / GIB
    )


def test_param_and_optimizer_offload_only_free_the_gpu_during_rollout():
    """verl 0.9.1 loads offloaded state back for the update (BaseEngineCtx), so the peak is unchanged."""
    kept = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=8192)
    offloaded = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=8192, param_offload=True, optimizer_offload=True)
    assert offloaded.total_gib == kept.total_gib
    assert kept.rollout_resident_gib == pytest.approx(kept.params_gib + kept.optimizer_gib)
    assert offloaded.rollout_resident_gib == 0
    only_params = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=8192, param_offload=True)
    assert only_params.rollout_resident_gib == pytest.approx(kept.optimizer_gib)


def test_offload_policy_keeps_the_state_on_the_cpu_during_training():
    parts = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=8192, offload_policy=True)
    assert parts.params_gib == parts.grads_gib == parts.optimizer_gib == parts.rollout_resident_gib == 0
    assert parts.layer_activations_gib > 0 and parts.gathered_params_gib > 0


def test_memory_grows_linearly_with_tokens_at_the_documented_slope():
    """Checkpointed: one bf16 input per layer, then the larger of the logits' moment and the recomputed layer's."""
    inputs = 28 * 2 * 3584
    for in_place, per_vocab in ((False, 6), (True, 2)):
        slope = inputs + max(hf_layer_activation_bytes_per_token(QWEN7B), per_vocab * 152064)
        small = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=8192, in_place_logits=in_place).total_gib
        large = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=16384, in_place_logits=in_place).total_gib
        assert (large - small) * GIB == pytest.approx(8192 * slope)


def test_the_recomputed_layer_and_the_logits_do_not_add_up():
    """Fused kernels leave no logits: the recomputed layer's moment is the peak, as before the logits counted."""
    fused = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=16384, use_fused_kernels=True)
    assert fused.forward_backward_gib == pytest.approx(
        fused.params_gib + fused.grads_gib + fused.optimizer_gib + fused.gathered_params_gib
        + fused.layer_activations_gib + fused.overhead_gib)
    assert fused.recomputed_layer_gib == pytest.approx(16384 * hf_layer_activation_bytes_per_token(QWEN7B) / GIB)


def test_the_7b_node_runs_update_peak():
    """The 23-layer 7B node run (results/node/qwen25-7b-grpo.2xh200.*, 2 x H200, FSDP over 2, 24,576-token budget,
    entropy_coeff 0, chunked in-place log-probs) peaked at 61.21 GiB in its update (verl's max_memory_allocated)."""
    shape = model_shape({**QWEN2_5_7B, "num_hidden_layers": 23})
    parts = fsdp_breakdown(shape, shard_size=2, tokens_per_gpu=24576, in_place_logits=True)
    estimate = parts.total_gib - parts.overhead_gib
    assert estimate == pytest.approx(61.21, rel=0.02)


def test_checkpointing_keeps_one_input_per_layer_plus_one_layer():
    layer = hf_layer_activation_bytes_per_token(QWEN7B)
    assert fsdp_activation_bytes_per_token(QWEN7B, gradient_checkpointing=False) == 28 * layer
    assert fsdp_activation_bytes_per_token(QWEN7B, gradient_checkpointing=True) == 28 * 2 * 3584 + layer


def test_fused_kernels_remove_the_logits_term():
    plain = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=16384)
    fused = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=16384, use_fused_kernels=True)
    assert plain.logits_gib == pytest.approx(16384 * 6 * 152064 / GIB)  # 13.9 GiB at 16k tokens
    assert fused.logits_gib == 0


def test_calibration_constants_scale_their_terms(monkeypatch):
    base = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=8192)
    monkeypatch.setattr(fsdp_memory, "FSDP_ACTIVATION_SCALE", 2.0)
    monkeypatch.setattr(fsdp_memory, "CUDA_CONTEXT_NCCL_GIB", 5.0)
    scaled = fsdp_breakdown(QWEN7B, shard_size=8, tokens_per_gpu=8192)
    assert scaled.overhead_gib == 5.0
    layer = hf_layer_activation_bytes_per_token(QWEN7B) / 2  # the unscaled layer
    assert (scaled.layer_activations_gib - base.layer_activations_gib) * GIB == pytest.approx(8192 * layer)


def test_total_is_the_sum_of_the_terms():
    parts = fsdp_breakdown(QWEN7B, shard_size=4, tokens_per_gpu=4096, gradient_checkpointing=False)
    terms = [
        parts.params_gib,
        parts.grads_gib,
        parts.optimizer_gib,
        parts.gathered_params_gib,
        parts.layer_activations_gib,
        parts.logits_gib,
        parts.overhead_gib,
    ]
    assert parts.total_gib == pytest.approx(sum(terms))
    assert hf_total_params(QWEN7B) * 16 / 4 / GIB < parts.total_gib

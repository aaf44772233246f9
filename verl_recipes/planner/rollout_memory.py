"""vLLM rollout memory per GPU: weights, KV cache capacity, concurrent sequences.

vLLM takes `gpu_memory_utilization × GPU memory` and fills what is left after the weights and its
profiled activations with KV cache. The activation/CUDA-graph part is a documented constant.
"""

from dataclasses import dataclass

from verl_recipes.planner.model_shape import (
    ModelShape,
    attention_params,
    embedding_params,
    gated_mlp_params,
    routed_expert_params,
)

GIB = 2**30
BF16_BYTES = 2
# vLLM's profiled activation peak (max_num_batched_tokens 8192), CUDA-graph pool and non-torch
# allocations inside the gpu_memory_utilization share (a 4 GB reserve).
VLLM_RESERVE_GIB = 4.0
# What a sleeping vLLM engine keeps during training (free_cache_engine=True): its CUDA-graph pool.
VLLM_SLEEP_RESIDUAL_GIB = 1.0


@dataclass(frozen=True)
class RolloutEstimate:
    weights_gib: float  # per GPU
    kv_bytes_per_token: float  # per GPU
    kv_capacity_tokens: int  # per engine (one DP rank: its TP group shares one KV pool)
    sequence_tokens: int
    concurrent_sequences: int  # per engine, at sequence_tokens each
    max_num_seqs: int

    @property
    def max_num_seqs_reachable(self) -> bool:
        return self.concurrent_sequences >= self.max_num_seqs


def kv_heads_per_gpu(shape: ModelShape, tp: int) -> float:
    """n_kv/TP; with TP > n_kv vLLM replicates so each GPU keeps one KV head."""
    return max(shape.num_kv_heads / tp, 1)


def kv_bytes_per_token(shape: ModelShape, tp: int) -> float:
    """2 (K, V) · L · n_kv · d · 2 B / TP."""
    return 2 * shape.num_layers * kv_heads_per_gpu(shape, tp) * shape.head_dim * BF16_BYTES


def rollout_weight_params(shape: ModelShape, tp: int, ep: int) -> float:
    """Parameters on one GPU: attention and vocabulary over TP; experts over EP (= TP·DP) when EP > 1, else
    over TP; norms and the router replicated. At TP 1 this is the whole HF model."""
    h = shape.hidden_size
    kv_replication = kv_heads_per_gpu(shape, tp) * tp / shape.num_kv_heads  # 1 unless TP > n_kv
    kv_extra = (kv_replication - 1) * 2 * shape.num_kv_heads * shape.head_dim / tp * h
    layer = attention_params(shape, tp) + kv_extra + 2 * h  # + input and post-attention RMSNorm
    if shape.is_moe:
        layer += routed_expert_params(shape, ep=ep, etp=1) if ep > 1 else routed_expert_params(shape, etp=tp)
        layer += gated_mlp_params(h, shape.shared_expert_ffn_hidden_size, tp)
        layer += shape.num_experts * h + (h if shape.shared_expert_ffn_hidden_size else 0)  # router, shared gate
    else:
        layer += gated_mlp_params(h, shape.ffn_hidden_size, tp)
    vocab = embedding_params(shape, tp) * (1 if shape.tie_word_embeddings else 2)
    return shape.num_layers * layer + vocab + h + shape.vision_params / tp


def rollout_memory(
    shape: ModelShape,
    tp: int,
    ep: int,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
    sequence_tokens: int,
    max_num_seqs: int,
) -> RolloutEstimate:
    """KV capacity = utilization × GPU memory − weights − VLLM_RESERVE_GIB, per GPU, pooled over the TP group."""
    weights = rollout_weight_params(shape, tp, ep) * BF16_BYTES
    kv_per_gpu = gpu_memory_utilization * gpu_memory_gib * GIB - weights - VLLM_RESERVE_GIB * GIB
    per_token = kv_bytes_per_token(shape, tp)
    capacity = max(int(kv_per_gpu // per_token), 0)
    return RolloutEstimate(
        weights_gib=weights / GIB,
        kv_bytes_per_token=per_token,
        kv_capacity_tokens=capacity,
        sequence_tokens=sequence_tokens,
        concurrent_sequences=capacity // sequence_tokens,
        max_num_seqs=max_num_seqs,
    )

"""Rollout memory per GPU: weights, KV cache capacity, concurrent sequences, for verl's two engines.

- vLLM takes `gpu_memory_utilization × GPU memory` and fills what is left after the weights and its profiled
  activations with KV cache. The activation/CUDA-graph part is a documented constant inside that share.
- SGLang (0.5.12, model_executor/model_runner_kv_cache_mixin.py) takes `mem_fraction_static` (verl passes
  gpu_memory_utilization) of the memory **free when it starts** for weights + KV cache, so a colocated trainer's
  memory at that moment shrinks its share instead of overfilling the card; its CUDA graphs come from the rest.
  Measured on one H100 (2026-12-07, the 1.5B bench shape, bench/results/e2e_cut.*): 70.74 GiB free at its start,
  a 46.46 GiB KV cache (1,739,693 tokens), decode and prefill graphs up to 512 sequences 1.90 GiB.
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
# SGLang's CUDA graphs, outside its static share; verl's sleep releases weights and KV cache, not these.
SGLANG_GRAPHS_GIB = 2.0
ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}  # the engines modelled: verl's name -> the name plans print


@dataclass(frozen=True)
class RolloutEstimate:
    engine: str  # "vllm" or "sglang"
    pool_gib: float  # per GPU: what gpu_memory_utilization applies to, the card (vLLM) or what is free at the start (SGLang)
    share_gib: float  # per GPU: what the engine takes while it generates, its weights and KV cache included
    kept_asleep_gib: float  # per GPU: what a sleeping engine keeps (free_cache_engine=True)
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
    engine: str = "vllm",
    held_at_start_gib: float = 0.0,
) -> RolloutEstimate:
    """KV capacity per GPU, pooled over the TP group. vLLM: utilization × GPU memory − weights − VLLM_RESERVE_GIB.
    SGLang: utilization × (GPU memory − `held_at_start_gib`, what the trainer holds when the engine starts) − weights,
    its graphs (SGLANG_GRAPHS_GIB) beside that share."""
    if engine not in ENGINES:
        raise ValueError(f"rollout engine {engine!r}: the planner knows {', '.join(ENGINES)}")
    weights = rollout_weight_params(shape, tp, ep) * BF16_BYTES
    if engine == "vllm":  # its share of the card, with its activation and graph reserve inside
        pool_gib, reserve_gib, graphs_gib, asleep_gib = gpu_memory_gib, VLLM_RESERVE_GIB, 0.0, VLLM_SLEEP_RESIDUAL_GIB
    else:  # its share of what is free at its start, its graphs beside it (and kept while it sleeps)
        pool_gib, reserve_gib, graphs_gib, asleep_gib = gpu_memory_gib - held_at_start_gib, 0.0, SGLANG_GRAPHS_GIB, \
            SGLANG_GRAPHS_GIB
    static_gib = gpu_memory_utilization * pool_gib
    kv_per_gpu = (static_gib - reserve_gib) * GIB - weights
    per_token = kv_bytes_per_token(shape, tp)
    capacity = max(int(kv_per_gpu // per_token), 0)
    return RolloutEstimate(
        engine=engine,
        pool_gib=pool_gib,
        share_gib=static_gib + graphs_gib,
        kept_asleep_gib=asleep_gib,
        weights_gib=weights / GIB,
        kv_bytes_per_token=per_token,
        kv_capacity_tokens=capacity,
        sequence_tokens=sequence_tokens,
        concurrent_sequences=capacity // sequence_tokens,
        max_num_seqs=max_num_seqs,
    )

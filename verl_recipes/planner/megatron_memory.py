"""Per-GPU memory of a Megatron actor, by the method of ISEEKYAN/mbridge memory_estimator.

Counts are elements (activations) and parameters; bytes come at the end: activations are bf16 (2 B),
weights+grads+optimizer use bytes_per_param. Units are GiB.

Conventions kept from the estimator so its numbers are reproduced exactly: TE layer spec (input
LayerNorm fused into linear_qkv, counted 0), router parameters counted 0, untied embeddings
(`share_embeddings_and_output_weights=False`) unless asked otherwise.
"""

from dataclasses import dataclass

from verl_recipes.planner.model_shape import (
    ModelShape,
    attention_params,
    embedding_params,
    gated_mlp_params,
    mlp_block_params,
    routed_expert_params,
)

GIB = 2**30
BF16_BYTES = 2
WEIGHT_AND_GRAD_BYTES = 6  # bf16 weight 2 + fp32 main grad 4
OPTIMIZER_BYTES = 12  # fp32 master 4 + Adam m, v 8


@dataclass(frozen=True)
class MegatronParallel:
    world_size: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # None: Megatron uses TP
    vpp: int | None = None
    sequence_parallel: bool = True  # effective only with TP > 1 (verl and mbridge switch it off at TP 1)
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp * self.cp)

    @property
    def sp(self) -> bool:
        return self.sequence_parallel and self.tp > 1


@dataclass(frozen=True)
class Recompute:
    granularity: str | None = None  # None | "selective" | "full"
    method: str | None = None  # "uniform" | "block" (full only)
    num_layers: int | None = None
    modules: tuple[str, ...] = ("core_attn",)  # selective only


@dataclass(frozen=True)
class StageMemory:
    pp_rank: int
    params: float  # parameters held by one GPU of this stage
    weight_grad_gib: float  # P·6 B, reported apart as the estimator does
    weight_grad_optim_gib: float
    activation_elements: float
    activation_gib: float

    @property
    def total_gib(self) -> float:
        return self.weight_grad_optim_gib + self.activation_gib


@dataclass(frozen=True)
class MegatronEstimate:
    stages: list[StageMemory]

    @property
    def peak(self) -> StageMemory:
        """The PP rank that needs the most memory (the estimator's UI shows this one)."""
        return max(self.stages, key=lambda stage: stage.total_gib)


# ---- layer split over PP stages and VPP chunks ----


def layers_per_stage(num_layers: int, parallel: MegatronParallel) -> list[int]:
    """Layers on each PP rank: even split, or first/last counts with the rest split over middle stages."""
    first, last = parallel.num_layers_in_first_pipeline_stage, parallel.num_layers_in_last_pipeline_stage
    if first is None and last is None:
        return [num_layers // parallel.pp] * parallel.pp
    middle_stages = parallel.pp - (first is not None) - (last is not None)
    middle_layers = num_layers - (first or 0) - (last or 0)
    per_middle = middle_layers // middle_stages if middle_stages else 0
    counts = [per_middle] * parallel.pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return counts


# ---- parameters ----


def layer_params(shape: ModelShape, parallel: MegatronParallel) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one GPU. Expert params get expert-DP bytes."""
    dense = attention_params(shape, parallel.tp)
    if not shape.is_moe:
        return dense + mlp_block_params(shape, parallel.tp), 0.0
    shared = gated_mlp_params(shape.hidden_size, shape.shared_expert_ffn_hidden_size, parallel.tp)
    pre_mlp_norm = shape.hidden_size  # a real TENorm in the MoE spec
    return dense + shared + pre_mlp_norm, routed_expert_params(shape, parallel.ep, parallel.expert_tp)


def bytes_per_param(
    use_distributed_optimizer: bool, optimizer_shards: int, optimizer_cpu_offload_fraction: float = 0.0
) -> float:
    """18 B without distributed optimizer, else 6 + 12/shards; the offloaded optimizer share leaves the GPU."""
    shards = optimizer_shards if use_distributed_optimizer else 1
    return WEIGHT_AND_GRAD_BYTES + OPTIMIZER_BYTES * (1 - optimizer_cpu_offload_fraction) / shards


# ---- activations of one transformer layer (elements, one micro-batch of t tokens) ----


def attention_activations(shape: ModelShape, parallel: MegatronParallel, tokens: float, recompute: Recompute) -> float:
    """Core attention 2·t·(n_kv/TP)·d (×2 with CP; 0 under selective recompute) + 4·t·(n_h·d)/TP."""
    core = 2 * tokens * shape.num_kv_heads / parallel.tp * shape.head_dim
    if parallel.cp > 1:
        core *= 2
    if recompute.granularity == "selective":  # SelfAttention.checkpoint_core_attention, any module list
        core = 0
    rest = 4 * tokens * shape.num_attention_heads * shape.head_dim / parallel.tp
    return core + rest


def dense_mlp_activations(shape: ModelShape, parallel: MegatronParallel, tokens: float, recompute: Recompute) -> float:
    """fc1 output + SwiGLU output: 1.5·t·(2F/TP); 0 when "mlp" is recomputed selectively."""
    if recompute.granularity == "selective" and "mlp" in recompute.modules:
        return 0
    return 1.5 * tokens * 2 * shape.ffn_hidden_size / parallel.tp


def moe_activations(shape: ModelShape, parallel: MegatronParallel, tokens: float, recompute: Recompute) -> float:
    """Router 2·t'·h, dispatcher t'·h·k, experts 1.5·t'·k·2F_e/ETP, shared 1.5·t'·2F_s/TP; t' = t_sp·ETP."""
    selective = recompute.modules if recompute.granularity == "selective" else ()
    if "moe" in selective:
        return 0
    t_moe = sequence_parallel_tokens(parallel, tokens) * parallel.expert_tp
    h, k = shape.hidden_size, shape.num_experts_per_tok
    router = 2 * t_moe * h
    dispatcher = t_moe * h * k
    experts = 0 if "moe_act" in selective else 1.5 * t_moe * k * 2 * shape.moe_ffn_hidden_size / parallel.expert_tp
    shared = 1.5 * t_moe * 2 * shape.shared_expert_ffn_hidden_size / parallel.tp
    return router + dispatcher + experts + shared


def sequence_parallel_tokens(parallel: MegatronParallel, tokens: float) -> float:
    """t_sp: tokens seen by norms and residual adds (split over TP under sequence parallelism)."""
    return tokens / parallel.tp if parallel.sp else tokens


def norm_and_residual_activations(
    shape: ModelShape, parallel: MegatronParallel, tokens: float, recompute: Recompute
) -> float:
    """self_attn_bda + mlp_bda = 2·t_sp·h, plus the MoE pre-MLP norm t_sp·h (input norm is fused, 0)."""
    t_sp = sequence_parallel_tokens(parallel, tokens)
    norms = t_sp * shape.hidden_size if shape.is_moe else 0
    if recompute.granularity == "selective" and "layernorm" in recompute.modules:
        norms = 0
    return norms + 2 * t_sp * shape.hidden_size


def layer_activations(shape: ModelShape, parallel: MegatronParallel, tokens: float, recompute: Recompute) -> float:
    mlp = moe_activations if shape.is_moe else dense_mlp_activations
    return (
        attention_activations(shape, parallel, tokens, recompute)
        + mlp(shape, parallel, tokens, recompute)
        + norm_and_residual_activations(shape, parallel, tokens, recompute)
    )


# ---- in-flight micro-batches of 1F1B ----


def microbatches_in_flight(parallel: MegatronParallel, pp_rank: int, chunk: int) -> int:
    """PP − rank without VPP; with VPP the first, middle and last chunks differ."""
    pp, vpp = parallel.pp, parallel.vpp
    if not vpp or vpp == 1:
        return pp - pp_rank
    if chunk == 0:
        return pp + max(2 * (pp - pp_rank) - 1 - pp, 0)
    if chunk < vpp - 1:
        return pp
    return min(2 * (pp - pp_rank) + 1, pp)


# ---- one PP rank ----


def chunk_activations(
    shape: ModelShape,
    parallel: MegatronParallel,
    tokens: float,
    recompute: Recompute,
    num_layers: int,
    chunk: int,
    in_flight: int,
    is_first: bool,
    is_last: bool,
    drop_logits: bool,
) -> float:
    """Activations of one model chunk: no recompute, or full recompute."""
    h = shape.hidden_size
    pre = tokens * h if is_first else 0  # embedding output (dropout p = 0 adds nothing)
    final_norm = tokens * h if is_last else 0
    post = 3 * tokens * shape.vocab_size / parallel.tp if is_last and not drop_logits else 0  # logits + fp32 softmax
    per_layer = layer_activations(shape, parallel, tokens, recompute)
    if recompute.granularity != "full":
        return (pre + num_layers * per_layer + final_norm) * in_flight + post
    common = pre + tokens * h * num_layers * in_flight  # one layer input kept per layer per micro-batch
    if recompute.method == "block":
        non_recomputed = num_layers - min(recompute.num_layers or 0, num_layers)
        if non_recomputed > 0:
            return common + post + per_layer * non_recomputed * in_flight
        return max(common + post, common + per_layer)
    # uniform: the peak is the loss, or one re-computed layer (counted on the first chunk only)
    return max(common + post, common + (per_layer if chunk == 0 else 0))


def stage_memory(
    shape: ModelShape,
    parallel: MegatronParallel,
    tokens: float,
    recompute: Recompute,
    pp_rank: int,
    stage_layers: int,
    use_distributed_optimizer: bool,
    optimizer_cpu_offload_fraction: float,
    share_embeddings_and_output_weights: bool,
    drop_logits: bool,
) -> StageMemory:
    vpp = parallel.vpp or 1
    chunk_layers = stage_layers // vpp
    first_rank, last_rank = pp_rank == 0, pp_rank == parallel.pp - 1
    dense_layer, expert_layer = layer_params(shape, parallel)
    dense = stage_layers * dense_layer
    expert = stage_layers * expert_layer
    if first_rank:
        # VL models: the vision tower sits on the first stage, TP-sharded (beyond the estimator, which is text-only)
        dense += embedding_params(shape, parallel.tp) + shape.vision_params / parallel.tp
    if last_rank:
        dense += shape.hidden_size  # final norm
        if not (share_embeddings_and_output_weights and parallel.pp == 1):
            dense += embedding_params(shape, parallel.tp)  # output layer
    activations = sum(
        chunk_activations(
            shape,
            parallel,
            tokens,
            recompute,
            chunk_layers,
            chunk,
            microbatches_in_flight(parallel, pp_rank, chunk),
            is_first=first_rank and chunk == 0,
            is_last=last_rank and chunk == vpp - 1,
            drop_logits=drop_logits,
        )
        for chunk in range(vpp)
    ) / parallel.cp  # CP splits every activation
    dense_bytes = bytes_per_param(use_distributed_optimizer, parallel.dp * parallel.cp, optimizer_cpu_offload_fraction)
    expert_dp = parallel.world_size // (parallel.pp * parallel.ep * parallel.expert_tp)  # expert data parallelism
    expert_bytes = bytes_per_param(use_distributed_optimizer, expert_dp, optimizer_cpu_offload_fraction)
    if parallel.ep * parallel.expert_tp == 1:  # the estimator splits the two only when EP·ETP > 1
        expert_bytes = dense_bytes
    return StageMemory(
        pp_rank=pp_rank,
        params=dense + expert,
        weight_grad_gib=(dense + expert) * WEIGHT_AND_GRAD_BYTES / GIB,
        weight_grad_optim_gib=(dense * dense_bytes + expert * expert_bytes) / GIB,
        activation_elements=activations,
        activation_gib=activations * BF16_BYTES / GIB,
    )


def megatron_memory(
    shape: ModelShape,
    parallel: MegatronParallel,
    micro_batch_size: int,
    seq_len: int,
    recompute: Recompute = Recompute(),
    use_distributed_optimizer: bool = True,
    optimizer_cpu_offload_fraction: float = 0.0,
    share_embeddings_and_output_weights: bool = False,
    drop_logits: bool = False,
) -> MegatronEstimate:
    """Per-PP-rank memory of one GPU for micro-batches of shape [micro_batch_size, seq_len].

    With verl's dynamic batching pass micro_batch_size=1, seq_len=ppo_max_token_len_per_gpu·CP.
    `drop_logits` removes the 3·t·V/TP logits term (verl use_fused_kernels=True).
    `share_embeddings_and_output_weights` counts a tied output layer once at PP 1 (the estimator never does).
    """
    tokens = micro_batch_size * seq_len
    return MegatronEstimate(
        stages=[
            stage_memory(
                shape,
                parallel,
                tokens,
                recompute,
                pp_rank,
                stage_layers,
                use_distributed_optimizer,
                optimizer_cpu_offload_fraction,
                share_embeddings_and_output_weights,
                drop_logits,
            )
            for pp_rank, stage_layers in enumerate(layers_per_stage(shape.num_layers, parallel))
        ]
    )

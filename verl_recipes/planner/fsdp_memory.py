"""Per-GPU memory of a verl 0.9.1 FSDP actor (HF model), term by term.

What verl's FSDP engine holds (verl/workers/engine/fsdp/transformer_impl.py, fsdp yaml defaults):
the model is built in `model_dtype: fp32` and sharded, mixed precision computes in bf16 and
reduces gradients in fp32, AdamW keeps fp32 exp_avg and exp_avg_sq. So 16 B per parameter,
divided by the FSDP shard size.

Offload, as verl 0.9.1 does it: `param_offload` / `optimizer_offload` move the state to the CPU
*between* phases; `train_mode()` loads it back before the update (BaseEngineCtx._context_switch),
so they do not lower the training peak; they free the GPU during rollout. Only
`offload_policy=True` with `strategy=fsdp2` (CPUOffloadPolicy) keeps parameters, gradients and
the optimizer step on the CPU during training.

The activation slope and the fixed overhead are named constants below, to be calibrated on a GPU
(tests/gpu/calibrate_fsdp.py measures it); `fsdp_breakdown` returns every term so a calibration script can compare each.
"""

from dataclasses import dataclass

from verl_recipes.planner.model_shape import (
    ModelShape,
    attention_params,
    embedding_params,
    hf_total_params,
    mlp_block_params,
)

GIB = 2**30
FP32_PARAM_BYTES = 4  # model_dtype fp32: the sharded parameter
FP32_GRAD_BYTES = 4  # sharded gradient, in the parameter dtype
ADAMW_STATE_BYTES = 8  # exp_avg + exp_avg_sq, fp32
# AdamW's step allocates fp32 temporaries of about one parameter's size on top of parameters, gradients
# and state: measured 20.05 B/param at the optimizer-step peak (verl FSDP2, Qwen2.5-1.5B, H200, 2026-11-21,
# results/planner/fsdp-calibration.qwen2.5-1.5b-h200.md), 16 B/param before it.
ADAMW_STEP_TEMP_BYTES = 4
BF16_BYTES = 2

# ---- calibration constants ----
# Multiplies the per-layer activation bytes counted by hf_layer_activation_bytes_per_token (1.0 = as counted).
FSDP_ACTIVATION_SCALE = 1.0
# Logits without fused kernels: bf16 logits + fp32 log-softmax, the estimator's 3·t·V elements × 2 B.
LOGITS_BYTES_PER_TOKEN_PER_VOCAB = 6
# With use_fused_kernels=True verl computes log-probs in chunks and never holds [tokens, vocab].
FUSED_LOGITS_BYTES_PER_TOKEN_PER_VOCAB = 0
# In place: the bf16 logits alone, their gradient written into their own storage. Every launch takes this path when the
# update computes no entropy (entropy_coeff 0): flash-attn's cross-entropy (inplace_backward), or without flash-attn the
# chunked log-probs the launcher adds (verl_recipes/runtime/logprobs.py). Measured through a whole step: the 7B
# node run (23 layers, 2 x H200, 2026-11-28, results/node/) peaked in its update at 61.21 GiB, and the state, the
# gathered units, one bf16 input per layer and 2 B per token per vocabulary entry at its 24,576-token budget come to
# 61.69 GiB (+0.8%); the 6 B above would say 80.44.
IN_PLACE_LOGITS_BYTES_PER_TOKEN_PER_VOCAB = 2
# Old log-probs (verl 0.9.1 RayPPOTrainer._compute_old_log_prob) always ask for the entropy, without grad.
# Unfused, the pass peaks while the logits exist: the lm_head's gathered bf16 weight, the final hidden states and the
# bf16 logits. Measured on an H200 within 2.5% at 8k-49k tokens for the Qwen2.5-1.5B and 7B shapes
# (tests/gpu/calibrate_log_prob.py, results/planner/log-prob-calibration.h200.md). verl torch.compiles the entropy
# (fsdp_config.use_torch_compile, on by default), and compiled it added nothing measurable, chunked or not.
# Eager (use_torch_compile=False), entropy_from_logits added 11.6-11.9 B per token per vocab entry beside the logits
# (fp32 and bf16 temporaries of softmax, logsumexp and their product), and entropy_from_logits_with_chunking
# 10.2-10.4 B per token of one chunk (its fp32 copy, softmax and product; 12 counted, from verl's code).
LOG_PROB_LOGITS_BYTES_PER_TOKEN_PER_VOCAB = 2
EAGER_ENTROPY_BYTES_PER_TOKEN_PER_VOCAB = 12
EAGER_CHUNKED_ENTROPY_BYTES_PER_TOKEN_PER_VOCAB = 12
# FSDP units whose bf16 parameters are gathered at the same time (the running one + one prefetched).
FSDP_GATHERED_UNITS = 2
# CUDA context + NCCL communicators + cuBLAS workspaces, per GPU (about 2-5 GB).
CUDA_CONTEXT_NCCL_GIB = 3.0


@dataclass(frozen=True)
class FsdpBreakdown:
    """GiB per GPU. `total_gib` is the training peak; `rollout_resident_gib` what stays during rollout."""

    params_gib: float
    grads_gib: float
    optimizer_gib: float
    gathered_params_gib: float  # unsharded bf16 copies of the running units, embedding and lm_head
    layer_activations_gib: float
    logits_gib: float
    overhead_gib: float
    rollout_resident_gib: float
    optimizer_step_temp_gib: float = 0.0
    # under gradient checkpointing, the one layer recomputed in the backward (part of layer_activations_gib): it
    # exists only after the logits' backward has freed them, so the two moments do not add up
    recomputed_layer_gib: float = 0.0

    @property
    def forward_backward_gib(self) -> float:
        return (
            self.params_gib
            + self.grads_gib
            + self.optimizer_gib
            + self.gathered_params_gib
            + self.layer_activations_gib
            - self.recomputed_layer_gib
            + max(self.recomputed_layer_gib, self.logits_gib)
            + self.overhead_gib
        )

    @property
    def optimizer_step_gib(self) -> float:
        """The peak inside optimizer.step(): activations are gone, AdamW's temporaries are not."""
        return self.params_gib + self.grads_gib + self.optimizer_gib + self.optimizer_step_temp_gib + self.overhead_gib

    @property
    def total_gib(self) -> float:
        """The training peak: whichever of the two phases is higher (small token budgets: the optimizer step)."""
        return max(self.forward_backward_gib, self.optimizer_step_gib)


def hf_layer_activation_bytes_per_token(shape: ModelShape) -> float:
    """Bytes autograd saves per token in one HF eager decoder layer (flash-attention, no Liger).

    RMSNorm ×2: fp32 input (4h) + bf16 normed output (2h); q/k/v and gate/up read that output.
    Attention: rotated q, k, v and the output (2·(2·n_h + 2·n_kv)·d). SwiGLU: gate, up, SiLU(gate),
    their product (4·2F). For a dense model; an MoE layer saves the top-k experts' share instead.
    """
    h, d = shape.hidden_size, shape.head_dim
    norms = 2 * (4 * h + 2 * h)
    attention = BF16_BYTES * (2 * shape.num_attention_heads + 2 * shape.num_kv_heads) * d
    mlp = 4 * BF16_BYTES * active_ffn_width(shape)
    if shape.is_moe:
        mlp += BF16_BYTES * h * shape.num_experts_per_tok  # dispatched copies of h
    return FSDP_ACTIVATION_SCALE * (norms + attention + mlp)


def active_ffn_width(shape: ModelShape) -> int:
    """MLP intermediate width one token runs through: the dense MLP, or its top-k experts + the shared expert."""
    if shape.is_moe:
        return shape.num_experts_per_tok * shape.moe_ffn_hidden_size + shape.shared_expert_ffn_hidden_size
    return shape.ffn_hidden_size


def fsdp_activation_bytes_per_token(shape: ModelShape, gradient_checkpointing: bool) -> float:
    """Slope of the layer activations: all layers, or (checkpointing) one bf16 input per layer + one layer."""
    layer = hf_layer_activation_bytes_per_token(shape)
    if gradient_checkpointing:
        return shape.num_layers * BF16_BYTES * shape.hidden_size + layer
    return shape.num_layers * layer


def logits_bytes_per_token(shape: ModelShape, use_fused_kernels: bool, in_place: bool = False) -> float:
    if use_fused_kernels:
        return FUSED_LOGITS_BYTES_PER_TOKEN_PER_VOCAB * shape.vocab_size
    return (IN_PLACE_LOGITS_BYTES_PER_TOKEN_PER_VOCAB if in_place else LOGITS_BYTES_PER_TOKEN_PER_VOCAB) * shape.vocab_size


def logits_gib(shape: ModelShape, positions: int, packed_copy: int, use_fused_kernels: bool,
               in_place: bool = False) -> float:
    """The update's logits: of `positions` packed tokens, or, on padded rows (`packed_copy` > 0), the model's bf16
    logits over every position plus the packed copy of the real tokens' that verl takes the log-probs of
    (workers/engine/fsdp/transformer_impl.py, prepare_model_outputs: narrow, then cat)."""
    per_token = logits_bytes_per_token(shape, use_fused_kernels, in_place)
    if not packed_copy:
        return positions * per_token / GIB
    padded = 0 if use_fused_kernels else BF16_BYTES * shape.vocab_size
    return (positions * padded + packed_copy * per_token) / GIB


def gathered_params(shape: ModelShape) -> float:
    """Parameters held unsharded in bf16 at the peak: FSDP_GATHERED_UNITS layers, embedding and lm_head."""
    layer = attention_params(shape) + mlp_block_params(shape)
    output_layer = 0 if shape.tie_word_embeddings else embedding_params(shape)
    return FSDP_GATHERED_UNITS * layer + embedding_params(shape) + output_layer


def fsdp_breakdown(
    shape: ModelShape,
    shard_size: int,
    tokens_per_gpu: int,
    gradient_checkpointing: bool = True,
    use_fused_kernels: bool = False,
    param_offload: bool = False,
    optimizer_offload: bool = False,
    offload_policy: bool = False,
    in_place_logits: bool = False,
    packed_copy: int = 0,
) -> FsdpBreakdown:
    """Terms of one GPU's memory for a micro-batch of `tokens_per_gpu` tokens (packed, remove-padding), or of
    `tokens_per_gpu` positions of padded rows whose `packed_copy` real tokens verl copies out of the logits.

    `shard_size`: GPUs the state is sharded over (fsdp_size, or the world size when fsdp_size=-1).
    `offload_policy`: FSDP2 CPUOffloadPolicy, the only offload that lowers the training peak.
    `in_place_logits`: log-probs whose backward overwrites the logits (IN_PLACE_LOGITS_BYTES_PER_TOKEN_PER_VOCAB).
    """
    params = hf_total_params(shape) / shard_size
    on_gpu = 0 if offload_policy else 1
    params_bytes = on_gpu * params * FP32_PARAM_BYTES
    optimizer_bytes = on_gpu * params * ADAMW_STATE_BYTES
    # Gradients are freed by zero_grad after the update; the parameters and optimizer stay unless offloaded.
    rollout_resident = (0 if param_offload else params_bytes) + (0 if optimizer_offload else optimizer_bytes)
    return FsdpBreakdown(
        params_gib=params_bytes / GIB,
        grads_gib=on_gpu * params * FP32_GRAD_BYTES / GIB,
        optimizer_gib=optimizer_bytes / GIB,
        gathered_params_gib=gathered_params(shape) * BF16_BYTES / GIB,
        layer_activations_gib=tokens_per_gpu * fsdp_activation_bytes_per_token(shape, gradient_checkpointing) / GIB,
        logits_gib=logits_gib(shape, tokens_per_gpu, packed_copy, use_fused_kernels, in_place_logits),
        overhead_gib=CUDA_CONTEXT_NCCL_GIB,
        rollout_resident_gib=rollout_resident / GIB,
        optimizer_step_temp_gib=on_gpu * params * ADAMW_STEP_TEMP_BYTES / GIB,
        recomputed_layer_gib=tokens_per_gpu * hf_layer_activation_bytes_per_token(shape) / GIB
        if gradient_checkpointing else 0.0,
    )


@dataclass(frozen=True)
class LogProbPass:
    """GiB per GPU of the actor's old-log-prob pass (no grad, entropy on). Its peak is the state plus the larger of
    two moments, never together: a layer running (gathered parameters, one layer's MLP intermediates) and the
    logits (the lm_head gathered, the final hidden states, the logits and an eager entropy's buffers)."""

    state_gib: float  # fp32 parameters (loaded back for the pass when offloaded) + AdamW states unless offloaded
    gathered_params_gib: float
    layer_peak_gib: float  # one layer's MLP intermediates, freed before the logits exist
    output_layer_gib: float  # the lm_head's bf16 weight, gathered while the logits are computed
    hidden_gib: float  # the final hidden states that the lm_head reads
    logits_gib: float
    entropy_gib: float  # 0 when verl torch.compiles the entropy (its default)
    packed_copy_gib: float = 0.0  # padded rows: the real tokens' logits copied out packed, after the entropy

    @property
    def layer_moment_gib(self) -> float:
        return self.gathered_params_gib + self.layer_peak_gib

    @property
    def logits_moment_gib(self) -> float:
        return self.output_layer_gib + self.hidden_gib + self.logits_gib + max(self.entropy_gib, self.packed_copy_gib)


def fsdp_log_prob_pass(
    shape: ModelShape,
    shard_size: int,
    tokens_per_gpu: int,
    use_fused_kernels: bool = False,
    entropy_chunk_size: int | None = None,
    optimizer_offload: bool = False,
    offload_policy: bool = False,
    torch_compile: bool = True,
    packed_copy: int = 0,
) -> LogProbPass:
    """The old-log-prob pass over a micro-batch of `tokens_per_gpu` tokens; `entropy_chunk_size`: the chunk of
    entropy_from_logits_with_chunking, None when it is off; `torch_compile`: fsdp_config.use_torch_compile.
    Fused kernels never hold [tokens, vocab]. Padded rows (`packed_copy` > 0: the real tokens among the
    `tokens_per_gpu` positions): verl takes their entropy eagerly over every position, compiled or chunked or not,
    then copies the real tokens' logits out packed; pass the chunk of verl_recipes.runtime.padded_entropy when it
    is loaded, and torch_compile=False."""
    params = 0 if offload_policy else hf_total_params(shape) / shard_size
    optimizer = 0 if optimizer_offload else params * ADAMW_STATE_BYTES
    vocab = 0 if use_fused_kernels else shape.vocab_size
    entropy_tokens = tokens_per_gpu if entropy_chunk_size is None else min(tokens_per_gpu, entropy_chunk_size)
    entropy_bytes = EAGER_ENTROPY_BYTES_PER_TOKEN_PER_VOCAB if entropy_chunk_size is None else \
        EAGER_CHUNKED_ENTROPY_BYTES_PER_TOKEN_PER_VOCAB
    return LogProbPass(
        state_gib=(params * FP32_PARAM_BYTES + optimizer) / GIB,
        gathered_params_gib=gathered_params(shape) * BF16_BYTES / GIB,
        layer_peak_gib=tokens_per_gpu * 3 * BF16_BYTES * active_ffn_width(shape) / GIB,  # gate, up, SiLU(gate) * up
        output_layer_gib=embedding_params(shape) * BF16_BYTES / GIB,  # [vocab, hidden], tied or not
        hidden_gib=tokens_per_gpu * shape.hidden_size * BF16_BYTES / GIB,
        logits_gib=tokens_per_gpu * LOG_PROB_LOGITS_BYTES_PER_TOKEN_PER_VOCAB * vocab / GIB,
        entropy_gib=0 if torch_compile else entropy_tokens * entropy_bytes * vocab / GIB,
        packed_copy_gib=packed_copy * LOG_PROB_LOGITS_BYTES_PER_TOKEN_PER_VOCAB * vocab / GIB,
    )

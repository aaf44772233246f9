"""Plan a composed, resolved verl 0.9.1 config: actor memory, rollout memory, a verdict (after the layout rules of
verl_recipes/check/layout.py, which a plan never estimates past).

Phases checked per GPU (colocated hybrid engine, the 0.9.1 default):
* actor update: the engine's peak + CUDA context/NCCL + a Megatron reference model kept on the GPU
  + what the sleeping vLLM engine keeps (its whole share when free_cache_engine=False);
* old log-probs (FSDP): the actor's no-grad pass with the entropy, whose [tokens x vocab] logits (and, with
  use_torch_compile off, the entropy's temporaries) at log_prob_max_token_len_per_gpu can outgrow the update when
  fused kernels are off;
* rollout: the actor state kept on the GPU during generation + the rollout engine's share + CUDA context,
  and a KV cache holding at least one max_prompt_length + max_response_length sequence. vLLM's share is a fraction
  of the card; SGLang's a fraction of what is free when it starts, before AdamW's states exist (they are made at the
  first update), so with SGLang those states must fit in the rest beside its CUDA graphs
  (verl_recipes/planner/rollout_memory.py);
* weight push (colocated): the actor's weights back on the GPU + the bucket verl's sender allocates
  (rollout/vllm_rollout/bucketed_weight_transfer.py:183, checkpoint_engine.update_weights_bucket_megabytes, 2 GiB by
  default). A small model peaks here: every tiny colocated run measured 2.0-2.2 GiB of max_memory_allocated, FSDP
  and Megatron alike, against 0.12 GiB for the async variants, whose trainer sends no bucket.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from verl_recipes.check.model import WITHOUT_FLASH_ATTN, without_flash_attn_loaded
from verl_recipes.planner.config import FSDP, MEGATRON, OVERRIDE, ROLLOUT, megatron_parallel, megatron_recompute
from verl_recipes.planner.config import get as _get
from verl_recipes.planner.config import require as _require
from verl_recipes.planner.fsdp_memory import CUDA_CONTEXT_NCCL_GIB, fsdp_breakdown, fsdp_log_prob_pass
from verl_recipes.planner.megatron_memory import BF16_BYTES, GIB, megatron_memory
from verl_recipes.planner.model_shape import ModelShape, embedding_params, model_shape
from verl_recipes.planner.rollout_memory import ENGINES, RolloutEstimate, rollout_memory

ACTOR = "actor_rollout_ref.actor"
MODEL = "actor_rollout_ref.model"
OPTIMIZER_OVERRIDE = f"{ACTOR}.optim.override_optimizer_config"


@dataclass(frozen=True)
class Term:
    name: str
    gib: float
    advice: str  # what to change when this term is the largest


@dataclass(frozen=True)
class TrainingSide:
    terms: list[Term]  # the actor update's peak, per GPU
    lines: list[str]
    rollout_resident_gib: float  # actor state left on the GPU while the rollout engine generates
    log_prob_terms: list[Term] = field(default_factory=list)  # the old-log-prob pass's peak; FSDP only
    log_prob_tokens: int = 0
    push_weights_gib: float = 0.0  # the actor's weights on the GPU while they are pushed to vLLM
    # the part of rollout_resident_gib made at the first optimizer step (its states): not there yet when the rollout
    # engine starts, which is what SGLang sizes its share by
    optimizer_resident_gib: float = 0.0


@dataclass
class Plan:
    fits: bool
    errors: list[str]
    lines: list[str]
    verdict: str
    training_terms: list[Term] = field(default_factory=list)
    rollout: RolloutEstimate | None = None
    # the trainer process's torch allocator peak over its phases, the quantity verl logs as
    # actor/perf/max_memory_allocated_gb (no CUDA context; vLLM runs in its own process)
    allocated_gib: float = 0.0
    # each phase's per-GPU total, as the verdict compares them with the GPU's memory
    phases_gib: dict[str, float] = field(default_factory=dict)


# ---- Megatron ----


def megatron_optimizer_cpu_offload_fraction(cfg: DictConfig) -> float:
    """Megatron's CPU optimizer (optimizer_cpu_offload) keeps this share of the optimizer off the GPU."""
    if not _get(cfg, f"{OPTIMIZER_OVERRIDE}.optimizer_cpu_offload", False):
        return 0.0
    return float(_get(cfg, f"{OPTIMIZER_OVERRIDE}.optimizer_offload_fraction", 1.0))


def megatron_training(cfg: DictConfig, shape: ModelShape, world_size: int, seq_tokens: int) -> TrainingSide:
    parallel = megatron_parallel(cfg, world_size)
    if _get(cfg, f"{ACTOR}.use_dynamic_bsz", False):
        # verl's budget is per CP rank: a micro-batch holds budget × CP tokens, split over CP
        micro_batch, seq_len = 1, _require(cfg, f"{ACTOR}.ppo_max_token_len_per_gpu") * parallel.cp
    else:
        micro_batch, seq_len = _require(cfg, f"{ACTOR}.ppo_micro_batch_size_per_gpu"), seq_tokens
    estimate = megatron_memory(
        shape,
        parallel,
        micro_batch,
        seq_len,
        megatron_recompute(cfg),
        use_distributed_optimizer=_get(cfg, f"{MEGATRON}.use_distributed_optimizer", True),
        optimizer_cpu_offload_fraction=megatron_optimizer_cpu_offload_fraction(cfg),
        share_embeddings_and_output_weights=shape.tie_word_embeddings,
        drop_logits=_get(cfg, f"{MODEL}.use_fused_kernels", False),
    )
    lines = [
        f"Megatron TP{parallel.tp} PP{parallel.pp} CP{parallel.cp} EP{parallel.ep} ETP{parallel.expert_tp} "
        f"VPP{parallel.vpp or 1} DP{parallel.dp}, micro-batch [{micro_batch}, {seq_len}]"
    ]
    lines += [
        f"  PP rank {stage.pp_rank}: {stage.params / 1e9:.2f} B params, weights+grads+optimizer "
        f"{stage.weight_grad_optim_gib:.2f} GiB + activations {stage.activation_gib:.2f} GiB "
        f"= {stage.total_gib:.2f} GiB"
        for stage in estimate.stages
    ]
    peak = estimate.peak
    terms = [
        Term(
            "weights+grads+optimizer",
            peak.weight_grad_optim_gib,
            f"raise {MEGATRON}.pipeline_model_parallel_size (or TP/EP), or keep the optimizer on the CPU with "
            f"+{OPTIMIZER_OVERRIDE}.optimizer_cpu_offload=True and optimizer_offload_fraction "
            f"({MEGATRON}.optimizer_offload only frees the GPU during rollout)",
        ),
        Term(
            "activations",
            peak.activation_gib,
            f"lower {ACTOR}.ppo_max_token_len_per_gpu (or ppo_micro_batch_size_per_gpu), set "
            f"{MODEL}.use_fused_kernels=True, enable full recompute ({OVERRIDE}.recompute_granularity=full, "
            f"recompute_method=uniform, recompute_num_layers=1) or raise TP/CP",
        ),
    ]
    param_offload = _get(cfg, f"{MEGATRON}.param_offload", False)
    uses_reference = _get(cfg, f"{ACTOR}.use_kl_loss", False) or _get(cfg, "algorithm.use_kl_in_reward", False)
    if uses_reference and not _get(cfg, "actor_rollout_ref.ref.megatron.param_offload", param_offload):
        terms.append(
            Term(
                "reference model weights",
                peak.params * BF16_BYTES / GIB,
                "set actor_rollout_ref.ref.megatron.param_offload=True",
            )
        )
    optimizer_on_gpu = not _get(cfg, f"{MEGATRON}.optimizer_offload", False)

    def kept(stage) -> tuple[float, float]:  # (state kept during rollout, the optimizer's part of it)
        optimizer = optimizer_on_gpu * (stage.weight_grad_optim_gib - stage.weight_grad_gib)
        return (0 if param_offload else stage.weight_grad_gib) + optimizer, optimizer

    resident, optimizer = max(kept(stage) for stage in estimate.stages)
    # verl loads offloaded bf16 weights back for the push (workers/engine/megatron/transformer_impl.py)
    return TrainingSide(terms, lines, resident, push_weights_gib=peak.params * BF16_BYTES / GIB,
                        optimizer_resident_gib=optimizer)


# ---- FSDP ----


def fsdp_shard_size(cfg: DictConfig, world_size: int) -> int:
    fsdp_size = _get(cfg, f"{FSDP}.fsdp_size", -1)
    return world_size if fsdp_size < 0 or fsdp_size >= world_size else fsdp_size


def mean_row_tokens(cfg: DictConfig) -> int:
    """A row's mean tokens in the planned workload: a prompt at data.max_prompt_length and the mean response of the
    benchmarks' long-tail lengths (verl_recipes/bench/lengths.py), what the node runs generate."""
    from verl_recipes.bench.lengths import sample

    max_response = _require(cfg, "data.max_response_length")
    return _require(cfg, "data.max_prompt_length") + round(float(sample(4096, max_response).responses.mean()))


def micro_batch(cfg: DictConfig, role: str, seq_tokens: int, ulysses: int) -> tuple[int, int, str]:
    """Positions one GPU's micro-batch of the update (role "actor") or the old log-probs ("log_prob") puts through
    the model, the real tokens among them when rows are padded (0 when packed), and a line saying how many.
    Padded (model.use_remove_padding=False): each row is as long as the longest, taken as max_prompt_length +
    max_response_length (a tenth of the workload's responses reach it), and a token budget holds about budget //
    mean_row_tokens rows."""
    dynamic, budget, rows_key = ((f"{ACTOR}.use_dynamic_bsz", f"{ACTOR}.ppo_max_token_len_per_gpu",
                                  f"{ACTOR}.ppo_micro_batch_size_per_gpu") if role == "actor" else
                                 (f"{ROLLOUT}.log_prob_use_dynamic_bsz", f"{ROLLOUT}.log_prob_max_token_len_per_gpu",
                                  f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu"))
    if _get(cfg, f"{MODEL}.use_remove_padding", True):
        if _get(cfg, dynamic, False):
            return _require(cfg, budget), 0, ""  # budget × SP, split over SP ranks
        return _require(cfg, rows_key) * seq_tokens // ulysses, 0, ""
    mean = mean_row_tokens(cfg)
    rows = max(1, _require(cfg, budget) // mean) if _get(cfg, dynamic, False) else _require(cfg, rows_key)
    return rows * seq_tokens, rows * min(mean, seq_tokens), (
        f"padded rows ({MODEL}.use_remove_padding=False): {rows} rows of {mean} tokens on average (prompts at "
        f"data.max_prompt_length, responses as verl_recipes/bench/lengths.py) padded to {seq_tokens}")


def fsdp_training(cfg: DictConfig, shape: ModelShape, world_size: int, seq_tokens: int) -> TrainingSide:
    ulysses = _get(cfg, f"{FSDP}.ulysses_sequence_parallel_size", 1)
    tokens, packed_copy, padding = micro_batch(cfg, "actor", seq_tokens, ulysses)
    offload_policy = _get(cfg, f"{FSDP}.offload_policy", False) and _get(cfg, f"{ACTOR}.strategy") == "fsdp2"
    checkpointing = _get(cfg, f"{MODEL}.enable_gradient_checkpointing", True)
    shard = fsdp_shard_size(cfg, world_size)
    parts = fsdp_breakdown(
        shape,
        shard_size=shard,
        tokens_per_gpu=tokens,
        gradient_checkpointing=checkpointing,
        use_fused_kernels=_get(cfg, f"{MODEL}.use_fused_kernels", False),
        param_offload=_get(cfg, f"{FSDP}.param_offload", False),
        optimizer_offload=_get(cfg, f"{FSDP}.optimizer_offload", False),
        offload_policy=offload_policy,
        # verl's update asks for the entropy when actor.calculate_entropy is set or entropy_coeff is not 0
        # (trainer/ppo/ray_trainer.py:1336); without it the log-probs overwrite the logits with their gradient
        # (workers/engine/fsdp/transformer_impl.py:1425)
        in_place_logits=not (_get(cfg, f"{ACTOR}.calculate_entropy", False) or _get(cfg, f"{ACTOR}.entropy_coeff", 0)),
        packed_copy=packed_copy,
    )
    state_advice = (
        f"shard over more GPUs ({FSDP}.fsdp_size=-1 or more GPUs), or use {ACTOR}.strategy=fsdp2 with "
        f"{FSDP}.offload_policy=True ({FSDP}.param_offload/optimizer_offload only free the GPU during rollout)"
    )
    terms = [
        Term("fp32 parameters", parts.params_gib, state_advice),
        Term("fp32 gradients", parts.grads_gib, state_advice),
        Term("AdamW states", parts.optimizer_gib, state_advice),
        Term("gathered bf16 layers, embedding, lm_head", parts.gathered_params_gib, "use Megatron TP for this model"),
        Term(
            "layer activations",
            parts.layer_activations_gib,
            f"lower {ACTOR}.ppo_max_token_len_per_gpu, set {MODEL}.enable_gradient_checkpointing=True, "
            f"or raise {FSDP}.ulysses_sequence_parallel_size",
        ),
        Term(
            # the recomputed layer and the logits exist at different moments: the larger counts
            "logits, beyond the recomputed layer" if parts.recomputed_layer_gib else "logits",
            max(0.0, parts.logits_gib - parts.recomputed_layer_gib),
            f"set {MODEL}.use_fused_kernels=True (not for vision-language models on FSDP2: see verl_recipes/check/recipe.py "
            f"fused_kernels) or lower {ACTOR}.ppo_max_token_len_per_gpu",
        ),
        # the optimizer step peaks after the activations are freed; counted only by what it adds on top
        Term("AdamW step temporaries beyond forward/backward",
             max(0.0, parts.optimizer_step_gib - parts.forward_backward_gib), state_advice),
    ]
    lines = [
        f"FSDP over {shard} GPUs (Ulysses SP {ulysses}), {tokens} tokens per micro-batch per GPU, "
        f"gradient checkpointing {'on' if checkpointing else 'off'}{', offload_policy on' if offload_policy else ''}",
        *([f"  {padding}"] if padding else []),
    ]
    log_prob_tokens, log_prob_terms = fsdp_log_prob_terms(cfg, shape, shard, seq_tokens, ulysses, offload_policy)
    # the fp32 shards back on the GPU, and one full bf16 tensor at a time gathered from them (the embedding the largest)
    push = parts.params_gib + embedding_params(shape) * BF16_BYTES / GIB
    optimizer = 0.0 if _get(cfg, f"{FSDP}.optimizer_offload", False) else parts.optimizer_gib
    return TrainingSide(terms, lines, parts.rollout_resident_gib, log_prob_terms, log_prob_tokens, push, optimizer)


def fsdp_log_prob_terms(
    cfg: DictConfig, shape: ModelShape, shard: int, seq_tokens: int, ulysses: int, offload_policy: bool
) -> tuple[int, list[Term]]:
    """Tokens per micro-batch and the terms of the actor's old-log-prob pass (verl 0.9.1 always asks it for the
    entropy); the CUDA context and what vLLM keeps are added by plan() as for the update."""
    tokens, packed_copy, _ = micro_batch(cfg, "log_prob", seq_tokens, ulysses)
    chunking = _get(cfg, f"{FSDP}.entropy_from_logits_with_chunking", False)
    compiled = _get(cfg, f"{FSDP}.use_torch_compile", True)
    chunk = _get(cfg, f"{FSDP}.entropy_from_logits_chunk_size", 2048) if chunking else None
    if packed_copy:  # padded rows: verl's eager entropy over every position, or ours in chunks where it is loaded
        from verl_recipes.runtime.padded_entropy import CHUNK_POSITIONS

        hook = without_flash_attn_loaded(cfg)
        compiled, chunking, chunk = False, hook, CHUNK_POSITIONS if hook else None
    fused = _get(cfg, f"{MODEL}.use_fused_kernels", False)
    lp = fsdp_log_prob_pass(
        shape,
        shard,
        tokens,
        use_fused_kernels=fused,
        entropy_chunk_size=chunk,
        optimizer_offload=_get(cfg, f"{FSDP}.optimizer_offload", False),
        offload_policy=offload_policy,
        torch_compile=compiled,
        packed_copy=packed_copy,
    )
    budget = f"lower {ROLLOUT}.log_prob_max_token_len_per_gpu"
    tp = "use Megatron TP for this model"
    terms = [Term("fp32 parameters + AdamW states", lp.state_gib,
                  f"set {FSDP}.optimizer_offload=True (the pass needs the parameters, not the optimizer)")]
    if lp.layer_moment_gib >= lp.logits_moment_gib:
        return tokens, [*terms, Term("gathered bf16 layers, embedding, lm_head", lp.gathered_params_gib, tp),
                        Term("one layer's MLP intermediates", lp.layer_peak_gib, budget)]
    logits_advice = f"{budget}, or set {MODEL}.use_fused_kernels=True where verl_recipes/check/model.py allows it"
    terms += [Term("gathered bf16 lm_head", lp.output_layer_gib, tp), Term("final hidden states", lp.hidden_gib, budget),
              Term("bf16 logits", lp.logits_gib, logits_advice)]
    if lp.packed_copy_gib > lp.entropy_gib:
        return tokens, [*terms, Term("the real tokens' logits copied out of the padded rows", lp.packed_copy_gib,
                                     logits_advice)]
    if lp.entropy_gib:
        fix = (f"load {WITHOUT_FLASH_ATTN} (configs/attention/sdpa_padded does: padded rows' entropy in chunks)"
               if packed_copy else f"set {FSDP}.use_torch_compile=True (compiled, the entropy adds nothing measurable)")
        terms.append(Term(f"eager entropy's softmax{' (chunked)' if chunking else ''}", lp.entropy_gib,
                          f"{fix}, or {budget}"))
    return tokens, terms


# ---- plan ----


def plan(cfg: DictConfig | dict, hf_config: dict | str | Path, gpu_memory_gib: float = 80.0) -> Plan:
    """Check the layout rules, then estimate the per-GPU memory of the actor update and of the rollout.

    `cfg`: a composed, resolved verl 0.9.1 config; `hf_config`: config.json as a dict, file or model directory.
    """
    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.create(cfg)
    shape = model_shape(hf_config)
    engine = _require(cfg, "model_engine")
    if engine not in ("dp", "megatron"):
        raise ValueError(f"model_engine={engine!r}: the planner knows 'dp' (FSDP) and 'megatron'")
    world_size = _require(cfg, "trainer.nnodes") * _require(cfg, "trainer.n_gpus_per_node")
    seq_tokens = _require(cfg, "data.max_prompt_length") + _require(cfg, "data.max_response_length")
    kind = f"MoE {shape.num_experts} experts top-{shape.num_experts_per_tok}" if shape.is_moe else "dense"
    header = (
        f"model {shape.model_type}: {shape.num_layers} layers, hidden {shape.hidden_size}, {kind}; "
        f"{world_size} GPUs × {gpu_memory_gib:g} GiB, engine {engine}"
    )
    from verl_recipes.check.layout import layout_errors  # the layout rules live with the other checks

    errors = layout_errors(cfg, shape)
    if errors:
        verdict = f"does not fit: {len(errors)} layout rule(s) broken, first: {errors[0]}"
        return Plan(fits=False, errors=errors, lines=[header, *errors], verdict=verdict)

    training = (megatron_training if engine == "megatron" else fsdp_training)(cfg, shape, world_size, seq_tokens)
    utilization = _require(cfg, f"{ROLLOUT}.gpu_memory_utilization")
    colocated = _get(cfg, f"{ROLLOUT}.nnodes", 0) == 0  # 0: rollout shares the trainer's GPUs
    actor_resident = training.rollout_resident_gib if colocated else 0.0
    # what the trainer holds when the engine starts: its state but the optimizer's, and its context
    held_at_start = actor_resident - training.optimizer_resident_gib + CUDA_CONTEXT_NCCL_GIB if colocated else 0.0
    tp = _get(cfg, f"{ROLLOUT}.tensor_model_parallel_size", 1)
    ep = _get(cfg, f"{ROLLOUT}.expert_parallel_size", 1)
    name = _get(cfg, f"{ROLLOUT}.name", "vllm")
    # an engine the planner has no model of (verl 0.9.1 also runs trtllm) is planned as vLLM, a fraction of the card
    label = ENGINES.get(name, f"{name} (planned as vLLM)")
    rollout = rollout_memory(
        shape, tp, ep, gpu_memory_gib, utilization, seq_tokens, _get(cfg, f"{ROLLOUT}.max_num_seqs", 256),
        engine=name if name in ENGINES else "vllm", held_at_start_gib=held_at_start,
    )
    # on the GPU in every training-side phase: the CUDA context, and what the sleeping rollout engine keeps
    beside = [Term("CUDA context + NCCL", CUDA_CONTEXT_NCCL_GIB, "nothing (fixed overhead)")]
    if colocated:
        kept = rollout.kept_asleep_gib if _get(cfg, f"{ROLLOUT}.free_cache_engine", True) else rollout.share_gib
        beside.append(Term(f"{label} kept during training", kept, f"set {ROLLOUT}.free_cache_engine=True"))
    terms = [*training.terms, *beside]
    training_gib = sum(term.gib for term in terms)
    log_prob_terms = [*training.log_prob_terms, *beside] if training.log_prob_terms else []
    log_prob_gib = sum(term.gib for term in log_prob_terms)
    push_own = push_phase_terms(cfg, training) if colocated else []
    push_terms = [*push_own, *beside] if push_own else []
    push_gib = sum(term.gib for term in push_terms)
    allocated = max(sum(term.gib for term in phase) for phase in (training.terms, training.log_prob_terms, push_own))

    rollout_gib = rollout.share_gib + actor_resident + CUDA_CONTEXT_NCCL_GIB
    reachable = "reachable" if rollout.max_num_seqs_reachable else "NOT reachable"
    lines = [
        header,
        *training.lines,
        *(f"  {term.name}: {term.gib:.2f} GiB" for term in terms),
        f"actor update peak: {training_gib:.2f} GiB of {gpu_memory_gib:g} GiB",
        *([f"old log-prob pass (no grad, entropy on): {training.log_prob_tokens} tokens per micro-batch per GPU",
           *(f"  {term.name}: {term.gib:.2f} GiB" for term in log_prob_terms),
           f"old log-prob peak: {log_prob_gib:.2f} GiB of {gpu_memory_gib:g} GiB"] if log_prob_terms else []),
        f"rollout {label} TP{tp} EP{ep}: weights {rollout.weights_gib:.2f} GiB/GPU, "
        f"KV {rollout.kv_bytes_per_token / 1024:.1f} KiB/token/GPU, {rollout.kv_capacity_tokens} tokens "
        f"= {rollout.concurrent_sequences} sequences of {seq_tokens} tokens per engine "
        f"(max_num_seqs {rollout.max_num_seqs} {reachable})",
        *([f"SGLang's share: {utilization:g} of the {rollout.pool_gib:.2f} GiB free at its start "
           f"(the trainer holds {held_at_start:.2f} GiB then; AdamW's {training.optimizer_resident_gib:.2f} GiB come "
           f"at the first update) + its CUDA graphs"] if rollout.engine == "sglang" else []),
        f"rollout phase: {label} share {rollout.share_gib:.2f} GiB + actor kept {actor_resident:.2f} GiB "
        f"+ CUDA context {CUDA_CONTEXT_NCCL_GIB:.2f} GiB = {rollout_gib:.2f} GiB",
        *([f"weight push: {' + '.join(f'{term.name} {term.gib:.2f}' for term in push_terms)} = {push_gib:.2f} GiB"]
          if push_terms else []),
        f"trainer's allocator peak (verl's actor/perf/max_memory_allocated_gb): {allocated:.2f} GiB",
    ]
    offload_keys = f"{MEGATRON if engine == 'megatron' else FSDP}.{{param_offload,optimizer_offload}}"
    limit = utilization_limit(rollout, utilization, gpu_memory_gib, actor_resident)
    fits, verdict = decide(terms, training_gib, rollout, rollout_gib, gpu_memory_gib, actor_resident, offload_keys,
                           log_prob_terms, push_terms, (utilization, limit), label)
    phases = {"actor update": training_gib, "old log-probs": log_prob_gib, "rollout": rollout_gib,
              "weight push": push_gib}
    return Plan(fits=fits, errors=[], lines=lines, verdict=verdict, training_terms=terms, rollout=rollout,
                allocated_gib=allocated, phases_gib=phases)


def utilization_limit(rollout: RolloutEstimate, utilization: float, gpu_memory_gib: float,
                      actor_resident_gib: float) -> float:
    """The highest gpu_memory_utilization whose rollout phase fits the GPU beside the actor's state, rounded down (a
    limit printed as the value already set, 0.6996 as 0.70, would advise no change). The share is that fraction of
    the engine's pool (the card for vLLM, what was free at its start for SGLang) plus what it keeps beside it."""
    beside = rollout.share_gib - utilization * rollout.pool_gib
    room = gpu_memory_gib - CUDA_CONTEXT_NCCL_GIB - actor_resident_gib - beside
    return math.floor(room / rollout.pool_gib * 100) / 100


def push_phase_terms(cfg: DictConfig, training: TrainingSide) -> list[Term]:
    """The colocated weight push: the actor's weights on the GPU (or whatever more it keeps there) + verl's bucket."""
    bucket_mib = _get(cfg, f"{ROLLOUT}.checkpoint_engine.update_weights_bucket_megabytes", 2048)
    return [
        Term("actor weights", max(training.rollout_resident_gib, training.push_weights_gib),
             "shard the actor over more GPUs (TP/PP or FSDP size)"),
        Term("push bucket", bucket_mib / 1024,
             f"lower {ROLLOUT}.checkpoint_engine.update_weights_bucket_megabytes (it must still hold the largest "
             f"tensor)"),
    ]


def decide(
    terms: list[Term],
    training_gib: float,
    rollout: RolloutEstimate,
    rollout_gib: float,
    gpu_memory_gib: float,
    actor_resident_gib: float,
    offload_keys: str,
    log_prob_terms: list[Term],
    push_terms: list[Term],
    utilization_and_limit: tuple[float, float],
    engine_label: str,
) -> tuple[bool, str]:
    """(fits, verdict): each phase that overflows names its largest term and what to change."""
    biggest = max(terms, key=lambda term: term.gib)
    problems = []
    if training_gib > gpu_memory_gib:
        problems.append(
            f"actor update needs {training_gib:.2f} GiB > {gpu_memory_gib:g} GiB; largest term: {biggest.name} "
            f"({biggest.gib:.2f} GiB): {biggest.advice}"
        )
    log_prob_gib = sum(term.gib for term in log_prob_terms)
    if log_prob_gib > gpu_memory_gib:
        largest = max(log_prob_terms, key=lambda term: term.gib)
        problems.append(
            f"old log-prob pass needs {log_prob_gib:.2f} GiB > {gpu_memory_gib:g} GiB; largest term: {largest.name} "
            f"({largest.gib:.2f} GiB): {largest.advice}"
        )
    push_gib = sum(term.gib for term in push_terms)
    if push_gib > gpu_memory_gib:
        largest = max(push_terms, key=lambda term: term.gib)
        problems.append(f"weight push needs {push_gib:.2f} GiB > {gpu_memory_gib:g} GiB; largest term: {largest.name} "
                        f"({largest.gib:.2f} GiB): {largest.advice}")
    if rollout_gib > gpu_memory_gib:
        utilization, limit = utilization_and_limit
        lower = (f" or lower {ROLLOUT}.gpu_memory_utilization from {utilization:.2f} to <= {limit:.2f}"
                 if 0 < limit < utilization else "")
        problems.append(
            f"rollout needs {rollout_gib:.2f} GiB > {gpu_memory_gib:g} GiB; the actor keeps {actor_resident_gib:.2f} "
            f"GiB next to the {engine_label} share: set {offload_keys}=True{lower}"
        )
    if rollout.concurrent_sequences < 1:
        problems.append(
            f"the KV cache holds {rollout.kv_capacity_tokens} tokens, less than one {rollout.sequence_tokens}-token "
            f"sequence: raise {ROLLOUT}.tensor_model_parallel_size or gpu_memory_utilization"
        )
    if problems:
        return False, "does not fit: " + "; ".join(problems)
    verdict = (
        f"fits: actor update {training_gib:.2f} GiB (largest term: {biggest.name} {biggest.gib:.2f} GiB), "
        f"rollout {rollout_gib:.2f} GiB{f', old log-probs {log_prob_gib:.2f} GiB' if log_prob_terms else ''}"
        f"{f', weight push {push_gib:.2f} GiB' if push_terms else ''} "
        f"of {gpu_memory_gib:g} GiB; "
        f"{rollout.concurrent_sequences} concurrent sequences per rollout engine"
    )
    if not rollout.max_num_seqs_reachable:
        verdict += (
            f" (max_num_seqs {rollout.max_num_seqs} not reachable: raise {ROLLOUT}.gpu_memory_utilization or "
            f"tensor_model_parallel_size, or lower max_num_seqs)"
        )
    return True, verdict

"""Batch, GPU and token arithmetic that verl 0.9.1 asserts only after start-up (or after the first rollout),
checked on the composed config before the planner runs: a config whose arithmetic fails is never planned.
"""

from __future__ import annotations

from omegaconf import DictConfig


def _sp(cfg: DictConfig) -> int:
    if cfg.model_engine == "megatron":
        return int(cfg.actor_rollout_ref.actor.megatron.context_parallel_size)
    return int(cfg.actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size)


def token_budgets(cfg: DictConfig) -> list[str]:
    """A sequence longer than a micro-batch budget aborts the run (verl utils/seqlen_balancing.py assert)."""
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    arr, sp = cfg.actor_rollout_ref, _sp(cfg)
    budgets = {
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": (arr.actor.use_dynamic_bsz, arr.actor.ppo_max_token_len_per_gpu),
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": (arr.ref.log_prob_use_dynamic_bsz, arr.ref.log_prob_max_token_len_per_gpu),
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": (
            arr.rollout.log_prob_use_dynamic_bsz, arr.rollout.log_prob_max_token_len_per_gpu),
    }
    errors = []
    for key, (enabled, budget) in budgets.items():
        if enabled and budget * sp < longest:
            errors.append(f"'{key}' = {budget} (x SP/CP {sp}) is smaller than the longest sequence, "
                          f"data.max_prompt_length + data.max_response_length = {longest}: verl would abort on the "
                          f"first long sample; raise it to at least {-(-longest // sp)} (e.g. ${{tokens:2}})")
    rollout = arr.rollout
    if not rollout.enable_chunked_prefill and rollout.max_num_batched_tokens < longest:
        errors.append(f"'actor_rollout_ref.rollout.max_num_batched_tokens' = {rollout.max_num_batched_tokens} < {longest} "
                      "with chunked prefill off: vLLM refuses to start; raise it or set enable_chunked_prefill=true")
    if rollout.max_model_len is not None and rollout.max_model_len < longest:
        errors.append(f"'actor_rollout_ref.rollout.max_model_len' = {rollout.max_model_len} < {longest} "
                      "(max prompt + max response): long samples would be cut by vLLM")
    return errors


def micro_batches(cfg: DictConfig) -> list[str]:
    """Fixed micro-batches need a size (verl's engine splits the mini-batch by it)."""
    actor = cfg.actor_rollout_ref.actor
    if not actor.use_dynamic_bsz and not actor.ppo_micro_batch_size_per_gpu:
        return ["'actor_rollout_ref.actor.use_dynamic_bsz' = false without 'actor_rollout_ref.actor."
                "ppo_micro_batch_size_per_gpu': set the micro-batch size, or use_dynamic_bsz=true with a token budget"]
    return []


def arithmetic_errors(cfg: DictConfig) -> list[str]:
    return token_budgets(cfg) + micro_batches(cfg)

"""Conditions verl 0.9.1 asserts only once its workers, engines or trainers run, checked on the composed config.

Each rule names the key, the verl file:line it mirrors (listed in verl_asserts.yaml) and a fix. The batch rules
cover dynamic batching, where verl's validate_config skips the divisibility it checks for fixed micro-batches.
"""

from __future__ import annotations

from omegaconf import DictConfig

from verl_recipes import entrypoints
from verl_recipes.planner.config import get, megatron_parallel, world_size

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"


def actor_dp(cfg: DictConfig) -> int:
    """Data-parallel ranks of the actor: the trainer pool's GPUs over the model-parallel group."""
    world = world_size(cfg)
    if cfg.model_engine == "megatron":
        return max(megatron_parallel(cfg, world).dp, 1)
    return max(world // int(get(cfg, f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size", 1)), 1)


def dynamic_batch_errors(cfg: DictConfig, entry: entrypoints.EntryPoint) -> list[str]:
    """With dynamic batching verl's validate_config skips the batch divisibility it checks for fixed micro-batches
    (utils/config.py:124); the engine worker still asserts it per mini-batch (workers/engine_workers.py:267)."""
    actor = cfg.actor_rollout_ref.actor
    if not actor.use_dynamic_bsz:
        return []
    dp, n = actor_dp(cfg), int(cfg.actor_rollout_ref.rollout.n)
    ranks = (f"the actor's {dp} data-parallel ranks (trainer.nnodes x trainer.n_gpus_per_node over the model-parallel "
             f"size)")
    errors = []
    samples = int(actor.ppo_mini_batch_size) * n
    if samples % dp:
        errors.append(f"'{ACTOR}.ppo_mini_batch_size' = {actor.ppo_mini_batch_size} x rollout.n {n} = {samples} "
                      f"samples per mini-batch do not split over {ranks} (verl "
                      f"workers/engine_workers.py:267 asserts it at the first update); make it a multiple of {dp}")
    if entry is not entrypoints.FULLY_ASYNC:  # the fully async trainer consumes mini-batches, not train batches
        if int(cfg.data.train_batch_size) < int(actor.ppo_mini_batch_size):
            errors.append(f"'{ACTOR}.ppo_mini_batch_size' = {actor.ppo_mini_batch_size} is larger than "
                          f"'data.train_batch_size' = {cfg.data.train_batch_size} (verl workers/config/actor.py:226, "
                          f"which 0.9.1 checks only without dynamic batching); make it at most the train batch")
        batch = int(cfg.data.train_batch_size) * n
        if batch % dp:
            errors.append(f"'data.train_batch_size' = {cfg.data.train_batch_size} x rollout.n {n} = {batch} samples "
                          f"do not split over {ranks} (verl utils/config.py:124, which "
                          f"0.9.1 checks only without dynamic batching); make it a multiple of {dp}")
    return errors


def worker_batching_errors(cfg: DictConfig) -> list[str]:
    """The actor worker's batching asserts (workers/engine_workers.py:616-637)."""
    arr = cfg.actor_rollout_ref
    actor, rollout = arr.actor, arr.rollout
    if actor.use_dynamic_bsz != rollout.log_prob_use_dynamic_bsz:
        return [f"'{ACTOR}.use_dynamic_bsz' = {actor.use_dynamic_bsz} but '{ROLLOUT}.log_prob_use_dynamic_bsz' = "
                f"{rollout.log_prob_use_dynamic_bsz}: verl's actor worker asserts they are equal "
                f"(workers/engine_workers.py:616); set both the same"]
    if actor.use_dynamic_bsz:
        needed = {f"{ROLLOUT}.log_prob_max_token_len_per_gpu": rollout.log_prob_max_token_len_per_gpu,
                  f"{ACTOR}.ppo_max_token_len_per_gpu": actor.ppo_max_token_len_per_gpu}
        where, fix = "633-634", "a token budget, e.g. ${tokens:8}"
    else:
        needed = {f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": rollout.log_prob_micro_batch_size_per_gpu,
                  f"{ACTOR}.ppo_micro_batch_size_per_gpu": actor.ppo_micro_batch_size_per_gpu}
        where, fix = "636-637", "a micro-batch size per GPU"
    return [f"'{key}' is unset with use_dynamic_bsz={actor.use_dynamic_bsz}: verl's actor worker asserts it "
            f"(workers/engine_workers.py:{where}); set {fix}" for key, value in needed.items() if value is None]


def model_length_errors(cfg: DictConfig, hf: dict | None) -> list[str]:
    """vLLM and SGLang servers refuse a max_model_len beyond the model's positions
    (vllm_async_server.py:1108, async_sglang_server.py:171)."""
    positions = (hf or {}).get("max_position_embeddings") or ((hf or {}).get("text_config") or {}).get(
        "max_position_embeddings")
    limit = cfg.actor_rollout_ref.rollout.max_model_len
    if not positions or limit is None or int(limit) <= int(positions):
        return []
    return [f"'{ROLLOUT}.max_model_len' = {limit} exceeds the model's max_position_embeddings ({positions}): the "
            f"rollout server refuses to start (verl workers/rollout/vllm_rollout/vllm_async_server.py:1108); "
            f"lower it, or shorten data.max_prompt_length + data.max_response_length"]


def sequence_parallel_errors(cfg: DictConfig) -> list[str]:
    """Ulysses sequence parallelism needs packed sequences (workers/engine/fsdp/transformer_impl.py:149)."""
    sp = int(get(cfg, f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size", 1) or 1)
    if cfg.model_engine != "megatron" and sp > 1 and not cfg.actor_rollout_ref.model.use_remove_padding:
        return [f"'{ACTOR}.fsdp_config.ulysses_sequence_parallel_size' = {sp} needs "
                f"'actor_rollout_ref.model.use_remove_padding=true' (verl workers/engine/fsdp/transformer_impl.py:149)"]
    return []


def optimizer_errors(cfg: DictConfig) -> list[str]:
    """The engine clips gradients on every step (workers/engine/fsdp/transformer_impl.py:795)."""
    if cfg.actor_rollout_ref.actor.optim.get("clip_grad", 1.0) is None:
        return [f"'{ACTOR}.optim.clip_grad' is null: verl's engine asserts a value at the first optimizer step "
                f"(workers/engine/fsdp/transformer_impl.py:795); set it (1.0 is verl's default)"]
    return []


def v1_trainer_errors(cfg: DictConfig, entry: entrypoints.EntryPoint) -> list[str]:
    """The V1 trainers' per-step batch asserts (trainer/ppo/v1/trainer_base.py:535 and :1486); main_ppo only."""
    if entry is not entrypoints.MAIN_PPO:
        return []
    errors = []
    train = int(cfg.data.train_batch_size)
    gen = int(cfg.data.get("gen_batch_size") or 0) or train
    if train <= 0 or train % gen:
        errors.append(f"'data.gen_batch_size' = {gen} does not divide 'data.train_batch_size' = {train}: verl fetches "
                      f"prompts in whole gen batches (trainer/ppo/v1/trainer_base.py:1486); make it a divisor")
    if cfg.trainer.v1.trainer_mode == "separate_async":
        sync = int(cfg.trainer.v1.separate_async.parameter_sync_step)
        if sync < 1 or train % sync:
            errors.append(f"'trainer.v1.separate_async.parameter_sync_step' = {sync} does not divide "
                          f"'data.train_batch_size' = {train} (trainer/ppo/v1/trainer_base.py:535)")
    return errors


def reward_model_errors(cfg: DictConfig) -> list[str]:
    """A reward model served by verl keeps its tokenizer (experimental/reward_loop/reward_model.py:47) and, on a
    pool of its own, has GPUs (trainer/ppo/v1/trainer_base.py:825-827)."""
    reward_model = cfg.reward.reward_model
    if not reward_model.enable:
        return []
    errors = []
    if reward_model.rollout.get("skip_tokenizer_init"):
        errors.append("'reward.reward_model.rollout.skip_tokenizer_init' must be false: verl's reward model asserts "
                      "it (experimental/reward_loop/reward_model.py:47)")
    if reward_model.enable_resource_pool:
        for key in ("nnodes", "n_gpus_per_node"):
            if int(reward_model.get(key) or 0) <= 0:
                errors.append(f"'reward.reward_model.{key}' = {reward_model.get(key)}: a reward model on its own pool "
                              f"(enable_resource_pool=true) needs GPUs (trainer/ppo/v1/trainer_base.py:825-827)")
    return errors


def megatron_bridge_errors(cfg: DictConfig) -> list[str]:
    """verl 0.9.1's Megatron engine loads models through mbridge only (workers/engine/megatron/transformer_impl.py:191)."""
    if cfg.model_engine == "megatron" and not get(cfg, f"{ACTOR}.megatron.use_mbridge", True):
        return [f"'{ACTOR}.megatron.use_mbridge' = false: verl 0.9.1's Megatron engine asserts it "
                f"(workers/engine/megatron/transformer_impl.py:191); set it true"]
    return []


def megatron_scheduler_errors(cfg: DictConfig) -> list[str]:
    """Megatron's OptimizerParamScheduler asserts lr_warmup_steps < lr_decay_steps (megatron/core/
    optimizer_param_scheduler.py), and verl's Megatron engine decays over trainer.total_training_steps unless
    optim.lr_decay_steps is set (verl utils/megatron/optimizer.py:238). FSDP runs the same warm-up unchecked, so a
    short run of a recipe with DAPO's 10 warm-up steps stops only on Megatron (tiny Qwen3-VL-MoE, 2026-11-26).
    Checked where the total is known (trainer.total_training_steps set); the recipes train no critic."""
    if cfg.model_engine != "megatron":
        return []
    optim = cfg.actor_rollout_ref.actor.optim
    decay = optim.get("lr_decay_steps") or get(cfg, "trainer.total_training_steps", None)
    if not decay:
        return []
    warmup = optim.get("lr_warmup_steps")
    if warmup is None or warmup <= 0:  # verl derives it from the ratio then (utils/megatron/optimizer.py:244)
        warmup = int(float(optim.get("lr_warmup_steps_ratio") or 0.0) * decay)
    if warmup < decay:
        return []
    return [f"'{ACTOR}.optim.lr_warmup_steps' = {warmup} is not below the {decay} steps the learning rate decays over "
            f"('{ACTOR}.optim.lr_decay_steps', else 'trainer.total_training_steps'): Megatron's scheduler asserts "
            f"lr_warmup_steps < lr_decay_steps at start-up; lower the warm-up or raise the steps"]


def startup_errors(cfg: DictConfig, entry: entrypoints.EntryPoint, hf: dict | None) -> list[str]:
    return (dynamic_batch_errors(cfg, entry) + worker_batching_errors(cfg) + model_length_errors(cfg, hf)
            + sequence_parallel_errors(cfg) + optimizer_errors(cfg)
            + v1_trainer_errors(cfg, entry) + reward_model_errors(cfg) + megatron_bridge_errors(cfg)
            + megatron_scheduler_errors(cfg))

"""Async training rules: what verl 0.9.1 asserts only after Ray, the GPUs and the models are up, checked on the
composed config before launch.

Two entry points train with rollout on its own GPUs (recipes/qwen25-7b-grpo/ASYNC.md):
- fully async, `python -m verl.experimental.fully_async_policy.fully_async_main` (card `entrypoint:`);
- main_ppo's V1 trainer with `trainer.v1.trainer_mode=separate_async`.
Every rule cites the line of the verl 0.9.1 wheel (site-packages/verl/...) that fails, and every message names
the invariant and the keys to change. Sync recipes only get the one rule that concerns them (hybrid_engine).
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from verl_recipes.entrypoints import FULLY_ASYNC, EntryPoint, Pool, gpu_pools, shares_nodes

# Where the cited lines live, relative to site-packages/verl/.
FULLY_ASYNC_SRC = "experimental/fully_async_policy/"
SEPARATE_ASYNC_SRC = "trainer/ppo/v1/trainer_separate_async.py"


# ---------------------------------------------------------------- resource pools


def _replica_gpus(cfg: DictConfig) -> int:
    rollout = cfg.actor_rollout_ref.rollout
    return int(rollout.tensor_model_parallel_size * rollout.data_parallel_size * rollout.pipeline_model_parallel_size)


def topology_errors(cfg: DictConfig, entry: EntryPoint, node_gpus: int) -> list[str]:
    """The trainer and rollout pools add up to the declared nodes, and the rollout pool holds whole engines."""
    pools = gpu_pools(cfg, entry)
    trainer = pools[0]
    rollout = next((p for p in pools if p.name == "standalone rollout"), None) or Pool(
        "standalone rollout", 0, 0, f"{entry.rollout_pool}.{{nnodes,n_gpus_per_node}}")
    split_hint = "pick a configs/async/split_* fragment"
    errors = []
    if trainer.nnodes < 1 or trainer.gpus_per_node < 1:
        errors.append(f"trainer pool is empty (trainer.nnodes={trainer.nnodes}, trainer.n_gpus_per_node="
                      f"{trainer.gpus_per_node}): verl asserts both > 0 (experimental/separation/utils.py:39-40); "
                      + split_hint)
    dynamic = entry is FULLY_ASYNC and cfg.async_training.get("use_dynamic_resource_scheduling", False)
    if (rollout.nnodes < 1 or rollout.gpus_per_node < 1) and not dynamic:
        errors.append(f"rollout pool is empty ({rollout.keys} = {rollout.nnodes} x {rollout.gpus_per_node}): no engine "
                      "would generate (trainer/ppo/v1/trainer_separate_async.py:64-67 asserts it for separate_async; "
                      "fully async only runs without one under use_dynamic_resource_scheduling, "
                      "fully_async_trainer.py:205); " + split_hint)
    if errors:
        return errors
    for pool in (trainer, rollout):
        if pool.gpus_per_node > node_gpus:
            errors.append(f"{pool.name.split()[-1]} pool asks {pool.gpus_per_node} GPUs per node but a node has "
                          f"{node_gpus}: set {pool.keys} <= {node_gpus} GPUs per node and raise nnodes instead")
    if shares_nodes(trainer, rollout, node_gpus) and trainer.nnodes != rollout.nnodes:
        errors.append(f"nnodes inconsistent: trainer.n_gpus_per_node + rollout n_gpus_per_node = "
                      f"{trainer.gpus_per_node} + {rollout.gpus_per_node} share each {node_gpus}-GPU node, so "
                      f"trainer.nnodes ({trainer.nnodes}) must equal the rollout nnodes ({rollout.nnodes}); set both, "
                      f"or give each pool whole nodes (n_gpus_per_node = {node_gpus}); " + split_hint)
    replica = _replica_gpus(cfg)
    if rollout.gpus % replica or (replica > rollout.gpus_per_node and replica % rollout.gpus_per_node):
        errors.append(f"rollout pool of {rollout.gpus} GPUs ({rollout.nnodes} x {rollout.gpus_per_node}) does not hold "
                      f"whole engines of {replica} GPUs (actor_rollout_ref.rollout tensor x data x pipeline parallel): "
                      f"verl starts GPUs // {replica} engines and leaves the rest idle "
                      "(workers/rollout/llm_server.py:455-460, replica.py:114); make the pool a multiple of the engine size")
    return errors


# ---------------------------------------------------------------- fully async (fully_async_main)


def _equals(cfg: DictConfig, key: str, want, why: str) -> list[str]:
    got = OmegaConf.select(cfg, key)
    return [] if got == want else [f"{key} must be {want} (got {got!r}): {why}; set {key}={want}"]


def fully_async_errors(cfg: DictConfig) -> list[str]:
    if "async_training" not in cfg or "rollout" not in cfg:
        return ["fully async needs the async_training and rollout blocks (fully_async_main.py:227 raises 'must set "
                "async_training config'; the rollouter reads rollout.*): add - /configs/async/fully_async to the "
                "variant's defaults"]
    at, arr, A = cfg.async_training, cfg.actor_rollout_ref, FULLY_ASYNC_SRC
    errors = []
    errors += _equals(cfg, "actor_rollout_ref.hybrid_engine", False,
                      f"trainer and rollouter never share GPUs (asserted, {A}fully_async_trainer.py:76, "
                      f"{A}fully_async_rollouter.py:350)")
    errors += _equals(cfg, "data.train_batch_size", 0,
                      f"the trainer forms batches from ppo_mini_batch_size x async_training.require_batches "
                      f"(asserted, {A}fully_async_rollouter.py:351)")
    errors += _equals(cfg, "data.gen_batch_size", 1,
                      f"the rollouter streams one prompt at a time (asserted, {A}fully_async_rollouter.py:352)")
    errors += _equals(cfg, "actor_rollout_ref.rollout.calculate_log_probs", True,
                      f"the rollout log-probs are the PPO anchor (asserted, {A}fully_async_rollouter.py:733)")
    errors += _equals(cfg, "actor_rollout_ref.rollout.mode", "async",
                      f"the rollouter drives server-mode engines (asserted, {A}fully_async_rollouter.py:842)")
    if at.staleness_threshold < 0:
        errors.append(f"async_training.staleness_threshold must be >= 0 (got {at.staleness_threshold}; asserted, "
                      f"{A}fully_async_rollouter.py:353): 0 is stream off-policy, 0.1-0.5 lets samples run ahead")
    if at.trigger_parameter_sync_step < 1:
        errors.append(f"async_training.trigger_parameter_sync_step must be >= 1 (got {at.trigger_parameter_sync_step}; "
                      f"asserted, {A}fully_async_rollouter.py:354)")
    if at.require_batches < 1:
        errors.append(f"async_training.require_batches must be >= 1 (got {at.require_batches}): the trainer waits for "
                      f"ppo_mini_batch_size x require_batches samples and the step count divides by it "
                      f"({A}fully_async_rollouter.py:424, 498)")
    errors += _weight_sync_errors(cfg, f"the fully async trainer syncs standalone engines through it "
                                       f"({A}fully_async_trainer.py:220)")
    errors += _reward_model_errors(cfg, f"{A}fully_async_rollouter.py:362")
    for key in ("nnodes", "n_gpus_per_node"):
        if cfg.rollout[key] != arr.rollout[key]:
            errors.append(f"rollout.{key} ({cfg.rollout[key]}) differs from actor_rollout_ref.rollout.{key} "
                          f"({arr.rollout[key]}): fully_async_main.py:235-236 overwrites the latter with the former, "
                          f"so the launcher would count the wrong GPUs; set actor_rollout_ref.rollout.{key} "
                          "(configs/async/split_*) and leave rollout.* to follow it")
    per_sync = arr.actor.ppo_mini_batch_size * at.require_batches * at.trigger_parameter_sync_step
    total = cfg.rollout.total_rollout_steps
    if total is not None and per_sync > 0 and total < per_sync:
        errors.append(f"rollout.total_rollout_steps = {total} prompts is less than one weight version "
                      f"(ppo_mini_batch_size x require_batches x trigger_parameter_sync_step = {per_sync}): "
                      f"total_train_steps would be 0 ({A}fully_async_rollouter.py:498); set it to a multiple of "
                      f"{per_sync}, or null to train trainer.total_epochs over the dataset")
    if cfg.trainer.test_freq == 0:
        errors.append(f"trainer.test_freq must not be 0: the trainer takes param_version % test_freq at the end "
                      f"({A}fully_async_trainer.py:529, ZeroDivisionError); use -1 to disable validation")
    if cfg.algorithm.get("filter_groups", {}).get("enable", False):
        errors.append("algorithm.filter_groups.enable is ignored by fully_async_main: only the V1 replay buffer "
                      "filters groups (trainer/ppo/v1/trainer_base.py:166); use the separate_async trainer "
                      "(- /configs/async/separate_async, card entrypoint verl.trainer.main_ppo) for DAPO")
    return errors


# ---------------------------------------------------------------- main_ppo V1 separate_async


def separate_async_errors(cfg: DictConfig) -> list[str]:
    arr, sep, S = cfg.actor_rollout_ref, cfg.trainer.v1.separate_async, SEPARATE_ASYNC_SRC
    errors = []
    if not cfg.trainer.use_v1:
        errors.append("trainer.v1.trainer_mode=separate_async needs trainer.use_v1=true: otherwise main_ppo runs the "
                      "legacy trainer (trainer/main_ppo.py:183), which ignores trainer.v1; set trainer.use_v1=true")
    train, mini, sync = cfg.data.train_batch_size, arr.actor.ppo_mini_batch_size, sep.parameter_sync_step
    if train != sync * mini:
        fix = (f"set trainer.v1.separate_async.parameter_sync_step={train // mini}" if mini and train % mini == 0
               else "make data.train_batch_size a multiple of actor_rollout_ref.actor.ppo_mini_batch_size")
        errors.append(f"batch invariant: data.train_batch_size ({train}) must equal "
                      f"trainer.v1.separate_async.parameter_sync_step ({sync}) x "
                      f"actor_rollout_ref.actor.ppo_mini_batch_size ({mini}) (asserted, {S}:59); {fix}")
    errors += _weight_sync_errors(cfg, f"asserted, {S}:68")
    errors += _reward_model_errors(cfg, f"{S}:72")
    if cfg.algorithm.rollout_correction.bypass_mode and not arr.rollout.calculate_log_probs:
        errors.append("algorithm.rollout_correction.bypass_mode=true takes old log-probs from the rollout, which "
                      "needs actor_rollout_ref.rollout.calculate_log_probs=true (trainer/ppo/v1/trainer_base.py:1642-1644 "
                      "reads rollout_log_probs); set it, or bypass_mode=false")
    switch = sep.hybrid_rollout.enable_switch and arr.hybrid_engine
    if switch and arr.rollout.get("disaggregation", {}).get("enabled", False):
        errors.append("trainer.v1.separate_async.hybrid_rollout.enable_switch=true cannot run with "
                      f"actor_rollout_ref.rollout.disaggregation.enabled=true (raises ValueError, {S}:95-103); "
                      "turn one of them off")
    env = (cfg.get("ray_kwargs", {}).get("ray_init", {}).get("runtime_env", {}) or {}).get("env_vars", {}) or {}
    if not arr.hybrid_engine and str(env.get("VERL_LOGGING_LEVEL", "INFO")).upper() in ("DEBUG", "INFO"):
        errors.append("actor_rollout_ref.hybrid_engine=false crashes at start-up at the default log level: "
                      f"{S}:181 calls logger.info(..., flush=True), which logging rejects (TypeError); set "
                      "ray_kwargs.ray_init.runtime_env.env_vars.VERL_LOGGING_LEVEL=WARN (configs/async/separate_async)")
    return errors


# ---------------------------------------------------------------- shared


def _weight_sync_errors(cfg: DictConfig, where: str) -> list[str]:
    backend = cfg.actor_rollout_ref.rollout.checkpoint_engine.backend
    if backend != "naive":
        return []
    return [f"actor_rollout_ref.rollout.checkpoint_engine.backend must not be 'naive' with standalone rollout GPUs "
            f"({where}): naive only updates engines inside the trainer's processes (checkpoint_engine/base.py:518), "
            "so the rollout would keep its first weights; set it to nccl (or nixl, mooncake)"]


def _reward_model_errors(cfg: DictConfig, where: str) -> list[str]:
    rm = cfg.reward.reward_model
    if rm.enable and not rm.enable_resource_pool:
        return [f"a reward model with async rollout needs its own GPUs (asserted, {where}): the rollout never pauses "
                "to lend it memory; set reward.reward_model.enable_resource_pool=true and its nnodes/n_gpus_per_node"]
    return []


def async_errors(cfg: DictConfig, entry: EntryPoint, node_gpus: int) -> list[str]:
    """Every error for the async setup of a composed, resolved config run by `entry` on nodes of `node_gpus` GPUs;
    [] when fine or sync. Each starts with the setup it concerns: `fully async:`, `separate_async:` or `GPU split:`."""
    if entry is FULLY_ASYNC:
        errors = [f"fully async: {e}" for e in fully_async_errors(cfg)]
        if "async_training" not in cfg or "rollout" not in cfg:
            return errors
    elif cfg.trainer.v1.trainer_mode == "separate_async":
        errors = [f"separate_async: {e}" for e in separate_async_errors(cfg)]
    elif not cfg.actor_rollout_ref.hybrid_engine:
        return ["actor_rollout_ref.hybrid_engine=false is honoured only by trainer.v1.trainer_mode=separate_async "
                "(trainer_separate_async.py:82) and fully_async_main; every other trainer needs it true "
                "(trainer/config/ppo_trainer.yaml:60, asserted by the legacy trainer at trainer/ppo/ray_trainer.py:334)"]
    else:
        return []
    return errors + [f"GPU split: {e}" for e in topology_errors(cfg, entry, node_gpus)]

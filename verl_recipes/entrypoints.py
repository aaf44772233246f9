"""The verl entry points a recipe may name in its card (`entrypoint:`), one record each.

A record says which module runs, which verl config it composes over, where it reads the GPU pool of a
standalone rollout, and how far its training metrics lag behind the step they belong to. Everything that needs
to know about an entry point (composition, the async and topology rules, the launcher's GPU count, the cluster's
pool check, the smoke gates) reads it from here.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from verl_recipes.catalog import RecipeError


@dataclass(frozen=True)
class EntryPoint:
    module: str
    config_name: str  # the verl config a recipe's defaults start from (`- /ppo_trainer`)
    config_folder: str  # that config's folder inside the verl package
    rollout_pool: str  # the block whose nnodes / n_gpus_per_node place a standalone rollout
    metrics_lag: int = 0  # training metrics of step k are logged with step k + lag

    @property
    def config_dir(self) -> str:
        return str(verl_root() / self.config_folder)


MAIN_PPO = EntryPoint("verl.trainer.main_ppo", "ppo_trainer", "trainer/config", "actor_rollout_ref.rollout")
# fully_async_main copies rollout.* over actor_rollout_ref.rollout.* (fully_async_main.py:235-236), and its trainer
# logs the training metrics of step k with those of step k + 1 (aggregated at the next weight sync), so step 1
# holds rollouter metrics only and the last step's training metrics are never logged.
FULLY_ASYNC = EntryPoint("verl.experimental.fully_async_policy.fully_async_main", "fully_async_ppo_trainer",
                         "experimental/fully_async_policy/config", "rollout", metrics_lag=1)
ENTRYPOINTS = {entry.module: entry for entry in (MAIN_PPO, FULLY_ASYNC)}


def get(module: str) -> EntryPoint:
    if module not in ENTRYPOINTS:
        raise RecipeError(f"card entrypoint '{module}' is not one of: {', '.join(ENTRYPOINTS)}")
    return ENTRYPOINTS[module]


def verl_root() -> Path:
    """The installed verl package (found without importing it, which is slow)."""
    return Path(importlib.util.find_spec("verl").origin).parent


def searchpath() -> str:
    """Every entry point's config folder, so a recipe's `- /ppo_trainer` or `- /fully_async_ppo_trainer` resolves.
    file:// because fully_async_policy/config is not a Python package that pkg:// could name."""
    return ",".join(f"file://{entry.config_dir}" for entry in ENTRYPOINTS.values())


def config_dir_of(config_name: str) -> str:
    for entry in ENTRYPOINTS.values():
        if entry.config_name == config_name:
            return entry.config_dir
    raise RecipeError(f"no verl config named '{config_name}'")


# ---------------------------------------------------------------- GPU pools


@dataclass(frozen=True)
class Pool:
    name: str  # trainer, standalone rollout, reward model, distillation teacher
    nnodes: int
    gpus_per_node: int
    keys: str  # the keys that set it, for messages

    @property
    def gpus(self) -> int:
        return self.nnodes * self.gpus_per_node


def gpu_pools(cfg: DictConfig, entry: EntryPoint) -> list[Pool]:
    """Every GPU pool verl places for this config (verl/trainer/ppo/v1/trainer_base.py:818-845): the trainer's,
    a standalone rollout's where the rollout does not share the trainer's GPUs, and a reward model or
    distillation teacher with GPUs of its own."""
    pools = [Pool("trainer", int(cfg.trainer.nnodes), int(cfg.trainer.n_gpus_per_node),
                  "trainer.nnodes, trainer.n_gpus_per_node")]
    rollout = OmegaConf.select(cfg, entry.rollout_pool)
    if rollout is not None and (rollout.get("nnodes") or not cfg.actor_rollout_ref.hybrid_engine):
        keys = f"{entry.rollout_pool}.{{nnodes,n_gpus_per_node}}"
        if entry is FULLY_ASYNC:
            keys += " (mirrored from actor_rollout_ref.rollout.*)"
        pools.append(Pool("standalone rollout", int(rollout.get("nnodes") or 0), int(rollout.get("n_gpus_per_node") or 0),
                          keys))
    reward_model = cfg.reward.reward_model
    if reward_model.enable and reward_model.enable_resource_pool:
        pools.append(Pool("reward model", int(reward_model.nnodes), int(reward_model.n_gpus_per_node),
                          "reward.reward_model.{nnodes,n_gpus_per_node}"))
    distillation = cfg.get("distillation")
    if distillation is not None and distillation.get("enabled"):
        pools.append(Pool("distillation teacher", int(distillation.nnodes), int(distillation.n_gpus_per_node),
                          "distillation.{nnodes,n_gpus_per_node}"))
    return pools


def shares_nodes(trainer: Pool, other: Pool, node_gpus: int) -> bool:
    """Two pools share nodes when one slice of each fits a node (e.g. 4 + 4 on 8 GPUs); otherwise each takes
    whole nodes of its own (e.g. 8 + 8)."""
    return trainer.gpus_per_node + other.gpus_per_node <= node_gpus


def nodes_needed(cfg: DictConfig, entry: EntryPoint, node_gpus: int) -> int:
    """Nodes of `node_gpus` GPUs that the trainer and a standalone rollout take together."""
    pools = gpu_pools(cfg, entry)
    trainer, rollout = pools[0], next((p for p in pools if p.name == "standalone rollout"), None)
    if rollout is None:
        return trainer.nnodes
    if shares_nodes(trainer, rollout, node_gpus):
        return max(trainer.nnodes, rollout.nnodes)
    return trainer.nnodes + rollout.nnodes


def gpus_per_node_needed(cfg: DictConfig, entry: EntryPoint, node_gpus: int) -> int:
    """GPUs the launch node must have: the trainer's, plus a standalone rollout's when both share one node."""
    pools = gpu_pools(cfg, entry)
    trainer, rollout = pools[0], next((p for p in pools if p.name == "standalone rollout"), None)
    if rollout is not None and rollout.nnodes and nodes_needed(cfg, entry, node_gpus) == 1:
        return trainer.gpus_per_node + rollout.gpus_per_node
    return trainer.gpus_per_node

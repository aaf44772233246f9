"""Memory and parallelism planner for verl 0.9.1 recipes (pure Python, CPU).

Entry point: `plan(cfg, hf_config, gpu_memory_gib)`; CLI: `python -m verl_recipes.planner cfg.yaml config.json`.
"""

from verl_recipes.planner.fsdp_memory import FsdpBreakdown, fsdp_breakdown
from verl_recipes.planner.megatron_memory import MegatronEstimate, MegatronParallel, Recompute, megatron_memory
from verl_recipes.planner.model_shape import ModelShape, hf_total_params, model_shape
from verl_recipes.planner.plan import Plan, plan
from verl_recipes.planner.rollout_memory import RolloutEstimate, rollout_memory

__all__ = [
    "FsdpBreakdown",
    "MegatronEstimate",
    "MegatronParallel",
    "ModelShape",
    "Plan",
    "Recompute",
    "RolloutEstimate",
    "fsdp_breakdown",
    "hf_total_params",
    "megatron_memory",
    "model_shape",
    "plan",
    "rollout_memory",
]

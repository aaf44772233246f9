"""Memory and parallelism planner for verl 0.9.1 recipes (pure Python, CPU).

Entry point: `plan(cfg, hf_config, gpu_memory_gib)`; CLI: `python -m scripts.planner cfg.yaml config.json`.
"""

from scripts.planner.fsdp_memory import FsdpBreakdown, fsdp_breakdown
from scripts.planner.megatron_memory import MegatronEstimate, MegatronParallel, Recompute, megatron_memory
from scripts.planner.model_shape import ModelShape, hf_total_params, model_shape
from scripts.planner.plan import Plan, plan
from scripts.planner.rollout_memory import RolloutEstimate, rollout_memory

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

"""The planner's memory verdict for the declared topology, as a check: run only on a config whose layout and
arithmetic hold, so a bad batch size is never reported as a memory problem."""

from __future__ import annotations

from omegaconf import DictConfig

from verl_recipes.catalog import Recipe, hf_config


def memory_plan(cfg: DictConfig, recipe: Recipe):
    """The planner's verdict for the declared topology, on the card's GPU memory (default 80 GiB); None without a model config."""
    from verl_recipes.planner import plan

    model = hf_config(cfg.actor_rollout_ref.model.path)
    if not model:
        return None  # files_and_imports reports the missing model config
    return plan(cfg, model, gpu_memory_gib=float(recipe.card_value("gpu_memory_gib", 80)))


def plan_errors(cfg: DictConfig, recipe: Recipe) -> list[str]:
    result = memory_plan(cfg, recipe)
    if result is None:
        return []
    return list(result.errors) + ([] if result.fits else [f"planner: {result.verdict} (make {recipe.name}-plan)"])

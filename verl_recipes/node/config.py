"""A node run's config, composed once: the recipe (with the user's ARGS) at G GPUs with its overrides, the lent
machine the planner picks for it and, where even that machine cannot hold the shape with the recipe's own offload,
the real width with fewer layers.

The machine follows issue 44: an H100 node where the planner fits the recipe in 80 GiB at G, else an H200 node. The
record states which, and why.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

from omegaconf import DictConfig

from verl_recipes.catalog import Recipe, RecipeError, hf_config
from verl_recipes.compose import compose, split_args
from verl_recipes.node.overrides import Override, node_overrides
from verl_recipes.planner import Plan, plan

# GPU memory the planner is given per card: the cards' 80 GB class, and torch's total on the lent H200s (139.80 GiB,
# the figure vLLM takes its gpu_memory_utilization share of)
GPU_MEMORY_GIB = {"h100": 80.0, "h200": 139.8}
# A node run's busiest phase must leave this much of the card free by the plan. The first 7B run (2 x H200,
# 2026-11-28) was planned at 138.95 of 139 GiB and OOMed waking vLLM in step 2: vLLM's process held 0.9 GiB of CUDA
# context beyond its share and our runner 0.6 GiB on GPU 0 (since moved to child processes); a plan within a GiB or
# two of the card is a coin toss, not a fit.
HEADROOM_GIB = 2.0


@dataclass(frozen=True)
class Machine:
    kind: str  # the lent machine, e.g. nvidia-h100-x4
    gpu_memory_gib: float
    why: str


@dataclass
class NodeConfig:
    recipe: Recipe
    gpus: int
    user_args: list[str]
    base: DictConfig  # the recipe with the user's ARGS, as its card declares it: what the overrides are computed from
    hub_id: str
    cfg: DictConfig  # the node run's config (with the hub id as the model), composed and resolved
    machine: Machine  # its `why` says why fewer layers, where `layers` is set
    layers: int | None  # None: the model's own depth
    plan: Plan  # the planner on cfg, on the machine's GPU memory, at `layers`

    def overrides(self, model: str | None = None) -> list[Override]:
        return node_overrides(self.recipe, self.base, self.gpus, model or self.hub_id)

    def args(self, model: str | None = None) -> list[str]:
        """The launch's Hydra arguments, with `model` (a built folder) in place of the hub id."""
        return node_args(self.recipe, self.base, self.gpus, self.user_args, model or self.hub_id)

    @property
    def on_machine(self) -> Recipe:
        """The recipe with its card's GPU memory set to the machine's, so `make check`'s planner proves it there."""
        return recipe_on(self.recipe, self.machine.gpu_memory_gib)


def recipe_on(recipe: Recipe, gpu_memory_gib: float) -> Recipe:
    return dataclasses.replace(recipe, card={**recipe.card, "gpu_memory_gib": gpu_memory_gib})


def with_layers(model_config: dict, layers: int | None) -> dict:
    """A config.json with `layers` decoder layers (in text_config too, where a VL config keeps its LLM's)."""
    if layers is None:
        return model_config
    out = copy.deepcopy(model_config)
    for block in (out, out.get("text_config")):
        if isinstance(block, dict) and "num_hidden_layers" in block:
            block["num_hidden_layers"] = layers
    return out


def pipeline_chunks(cfg: DictConfig) -> int:
    """Layers must divide into PP x VPP chunks on Megatron (1 on FSDP)."""
    if cfg.model_engine != "megatron":
        return 1
    megatron = cfg.actor_rollout_ref.actor.megatron
    return int(megatron.pipeline_model_parallel_size) * int(megatron.virtual_pipeline_model_parallel_size or 1)


def node_args(recipe: Recipe, base: DictConfig, gpus: int, user_args: list[str], model: str) -> list[str]:
    """The user's ARGS first (they change the recipe whose counts the overrides scale), then the overrides."""
    return [*user_args, *(o.arg(base) for o in node_overrides(recipe, base, gpus, model))]


def fit(cfg: DictConfig, model_config: dict, gpus: int) -> tuple[Machine, int | None]:
    """The lent machine (H100 where the planner fits 80 GiB, else H200) and the layers: None (the real depth), or the
    most that the planner fits on the H200 machine, in whole pipeline chunks."""
    verdicts = {}
    for card, gib in GPU_MEMORY_GIB.items():
        result = plan(cfg, model_config, gib)
        if result.errors:
            raise RecipeError(f"not planned at {gpus} GPUs: {result.verdict}; add a layout for it to "
                              f"verl_recipes/node/overrides.yaml")
        if roomy(result, gib):
            why = (f"the planner fits it in {gib:g} GiB at G={gpus}" if card == "h100" else
                   f"the planner does not fit it in {GPU_MEMORY_GIB['h100']:g} GiB at G={gpus} "
                   f"({verdicts['h100']}); it fits {gib:g} GiB")
            return Machine(f"nvidia-{card}-x{gpus}", gib, why), None
        verdicts[card] = verdict(result, gib)
    real, chunk, gib = num_layers(model_config), pipeline_chunks(cfg), GPU_MEMORY_GIB["h200"]
    for layers in range((real - 1) // chunk * chunk, 0, -chunk):
        if roomy(plan(cfg, with_layers(model_config, layers), gib), gib):
            why = (f"{gpus} GPUs of {gib:g} GiB cannot hold all {real} layers even with the recipe's offload "
                   f"({verdicts['h200']}); {layers} layers of the real width fit")
            return Machine(f"nvidia-h200-x{gpus}", gib, why), layers
    raise RecipeError(f"no depth of this model fits {gpus} GPUs of {gib:g} GiB: {verdicts['h200']}")


def roomy(result: Plan, gib: float) -> bool:
    """The plan fits with HEADROOM_GIB of the card to spare in its busiest phase."""
    return result.fits and max(result.phases_gib.values()) <= gib - HEADROOM_GIB


def verdict(result: Plan, gib: float) -> str:
    if not result.fits:
        return result.verdict
    phase, need = max(result.phases_gib.items(), key=lambda item: item[1])
    return f"fits, but its {phase} phase needs {need:.2f} of {gib:g} GiB, within the {HEADROOM_GIB:g} GiB headroom"


def num_layers(model_config: dict) -> int:
    return int({**model_config, **model_config.get("text_config", {})}["num_hidden_layers"])


def compose_node(recipe: Recipe, gpus: int, user_args: str | list[str] | None = None) -> NodeConfig:
    """Compose the node run of `recipe` on `gpus` GPUs once, pick its machine and depth, and plan it."""
    user_args = split_args(user_args)
    base = compose(recipe, user_args)
    hub_id = str(base.actor_rollout_ref.model.path)
    model_config = hf_config(hub_id)
    if not model_config:
        raise RecipeError(f"{recipe.label}: no config.json for {hub_id} under models/; a node run builds that shape")
    cfg = compose(recipe, node_args(recipe, base, gpus, user_args, hub_id))
    machine, layers = fit(cfg, model_config, gpus)
    planned = plan(cfg, with_layers(model_config, layers), machine.gpu_memory_gib)
    return NodeConfig(recipe, gpus, user_args, base, hub_id, cfg, machine, layers, planned)

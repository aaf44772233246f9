"""The overrides of a node run, each with its reason: the recipe at G GPUs with its own settings.

From overrides.yaml: the run settings (3 steps, no checkpoints or validation, forced lengths, a varying reward) and
the layouts a recipe must change at some G. Computed here from the recipe's composed config: the node (G GPUs, one
node), the model, every global count scaled by G over the GPUs the recipe declares (so each per-GPU quantity stays
what the recipe sets), and a vLLM replica that spans more GPUs than the node has.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from verl_recipes import yaml_parser
from verl_recipes.catalog import Recipe, RecipeError

FILE = Path(__file__).with_name("overrides.yaml")
ROLLOUT = "actor_rollout_ref.rollout"
MODEL_KEY = "actor_rollout_ref.model.path"
# counts over the whole job, not per GPU: verl splits each over the data-parallel ranks
GLOBAL_COUNTS = (
    "data.train_batch_size",
    "data.gen_batch_size",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size",
    "actor_rollout_ref.ref.log_prob_micro_batch_size",
    f"{ROLLOUT}.log_prob_micro_batch_size",
)


@dataclass(frozen=True)
class Override:
    key: str
    value: object
    why: str

    def arg(self, cfg: DictConfig) -> str:
        """The Hydra override; `+` for a key the composed recipe does not have (verl's free-form blocks)."""
        plus = "" if OmegaConf.select(cfg, self.key, default="<absent>") != "<absent>" else "+"
        return f"{plus}{self.key}={literal(self.value)}"

    def as_dict(self) -> dict:
        return {"key": self.key, "value": self.value, "why": self.why}


def literal(value) -> str:
    """A value in Hydra's override grammar: strings quoted, so paths with ':' or '/' stay one string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(literal(item) for item in value) + "]"
    return str(value)


@functools.cache
def table() -> dict:
    return yaml_parser.safe_load(FILE.read_text())


def _entries(block: dict, where: str) -> list[Override]:
    try:
        return [Override(key, entry["value"], " ".join(str(entry["why"]).split())) for key, entry in block.items()]
    except (KeyError, TypeError):
        raise RecipeError(f"{FILE}: every entry under {where} needs `value:` and `why:`") from None


def run_settings() -> list[Override]:
    return _entries(table()["run"], "run")


def layout(recipe: Recipe, gpus: int) -> list[Override]:
    """overrides.yaml's layout changes for this recipe (a variant's own entry, else the recipe's) at `gpus`."""
    layouts = table().get("layouts") or {}
    spec = f"{recipe.name}:{recipe.variant}" if recipe.variant else recipe.name
    block = (layouts.get(spec, layouts.get(recipe.name)) or {}).get(gpus) or {}
    return _entries(block, f"layouts.{spec}.{gpus}")


def declared_gpus(cfg: DictConfig) -> int:
    return int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)


def scaled_counts(cfg: DictConfig, gpus: int) -> list[Override]:
    """Every global count set, times gpus / the GPUs the recipe declares."""
    declared, out = declared_gpus(cfg), []
    for key in GLOBAL_COUNTS:
        value = OmegaConf.select(cfg, key, default=None)
        if not value or gpus == declared:
            continue
        if value * gpus % declared:
            raise RecipeError(f"'{key}' = {value} does not scale to {gpus} GPUs: {value} x {gpus} / {declared} is not "
                              f"a whole number; pass ARGS=\"{key}=...\" with a multiple of {declared}")
        out.append(Override(key, value * gpus // declared,
                            f"{value} on the {declared} GPUs the recipe declares, x {gpus}/{declared}: the same count "
                            f"per GPU"))
    return out


def rollout_replica(cfg: DictConfig, gpus: int) -> list[Override]:
    """A vLLM replica wider than the node keeps its TP (and PP) and shrinks its DP to fit; experts follow (EP = TP x
    DP, verl's rule)."""
    rollout = OmegaConf.select(cfg, ROLLOUT)
    tp, dp = int(rollout.tensor_model_parallel_size), int(rollout.data_parallel_size)
    pp = int(rollout.get("pipeline_model_parallel_size") or 1)
    if tp * dp * pp <= gpus:
        return []
    if gpus % (tp * pp):
        raise RecipeError(f"the vLLM replica's TP {tp} x PP {pp} does not divide {gpus} GPUs: add a layout for this "
                          f"recipe at {gpus} GPUs to {FILE}")
    fit = gpus // (tp * pp)
    out = [Override(f"{ROLLOUT}.data_parallel_size", fit,
                    f"one vLLM replica of TP {tp} x DP {dp} spans {tp * dp * pp} GPUs; DP {fit} keeps TP {tp} and "
                    f"covers the node's {gpus}")]
    if int(rollout.expert_parallel_size) > 1:
        out.append(Override(f"{ROLLOUT}.expert_parallel_size", tp * fit,
                            f"experts over the replica's {tp * fit} GPUs: EP = TP x DP (verl's rule)"))
    return out


def node_overrides(recipe: Recipe, cfg: DictConfig, gpus: int, model: str) -> list[Override]:
    """Everything a node run of `recipe` (composed as `cfg`) on `gpus` GPUs changes, in the order they apply."""
    if gpus < 1:
        raise RecipeError(f"G={gpus}: a node run needs at least one GPU")
    node = [Override("trainer.nnodes", 1, "one node"),
            Override("trainer.n_gpus_per_node", gpus, f"the node's {gpus} GPUs"),
            Override(MODEL_KEY, model, "the recipe's model shape, random init (verl_recipes.random_models), built on "
                                       "the node: no hub, no weights")]
    return [*node, *run_settings(), *scaled_counts(cfg, gpus), *rollout_replica(cfg, gpus), *layout(recipe, gpus)]

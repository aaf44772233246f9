"""`make check`: prove a recipe is right for the installed verl, on CPU, before any GPU is spent.

The rule families run in this order, each returning one message per fault that names the key (or file) and says
what to do: keys (schema, legacy, removed), then layout and arithmetic (GPUs, parallel sizes, batches, token
budgets), then the model, files and Python paths, verl's own typed configs and validate_config, the pass-through
blocks and the async setup; the memory planner runs last, and only on a config whose layout and arithmetic hold.
"""

from __future__ import annotations

from verl_recipes import entrypoints
from verl_recipes.catalog import Recipe, RecipeError, hf_config
from verl_recipes.check.arithmetic import arithmetic_errors
from verl_recipes.check.async_training import async_errors
from verl_recipes.check.files import files_and_imports
from verl_recipes.check.gates import logger_errors
from verl_recipes.check.keys import unknown_and_ignored_keys
from verl_recipes.check.layout import layout_errors
from verl_recipes.check.memory import plan_errors
from verl_recipes.check.model import attention, chat_template, fused_kernels, megatron_language_model, vision_freeze
from verl_recipes.check.passthrough import check as passthrough_errors
from verl_recipes.check.startup import startup_errors
from verl_recipes.check.typed import typed_configs
from verl_recipes.compose import cli_group_choices, compose, compose_verl_base, own_files, resolved, split_args
from verl_recipes.planner.model_shape import model_shape


def check(recipe: Recipe, args: str | list[str] | None = None) -> list[str]:
    """Every error for one recipe (with the user's ARGS); an empty list means proven."""
    arg_list = split_args(args)
    try:
        raw = compose(recipe, arg_list, resolve=False)  # interpolations kept, so keys compare like verl's own
        cfg = resolved(raw, recipe)
        entry = entrypoints.get(recipe.entrypoint)
    except RecipeError as err:
        return [str(err)]
    base = compose_verl_base(entry.config_name, cfg.model_engine)
    files = own_files(recipe.config_name, cli_group_choices(arg_list))
    errors = unknown_and_ignored_keys(raw, base, files, arg_list)
    model = hf_config(cfg.actor_rollout_ref.model.path)
    shape_errors = (layout_errors(cfg, model_shape(model), entry) if model else []) + arithmetic_errors(cfg)
    shape_errors += async_errors(cfg, entry, recipe.node_gpus)
    shape_errors += startup_errors(cfg, entry, model)
    errors += shape_errors
    errors += vision_freeze(cfg) + megatron_language_model(cfg) + fused_kernels(cfg) + attention(cfg) + chat_template(cfg)
    errors += files_and_imports(cfg, recipe) + logger_errors(cfg.trainer.logger)
    errors += typed_configs(cfg)
    errors += passthrough_errors(cfg)
    if not shape_errors:
        errors += plan_errors(cfg, recipe)
    return [f"{recipe.label}: {e}" for e in errors]

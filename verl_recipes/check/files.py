"""Files and Python paths a recipe names: data, model config, reward function, dataset class, tool configs and
their classes, agent loop config, external libraries. Each must exist and import here before anything starts."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from verl_recipes import yaml_parser
from verl_recipes.catalog import Recipe, hf_config, model_config_dir, models_dir
from verl_recipes.check.data_columns import GUIDE, column_problems


def _import_object(path: str, name: str | None, what: str) -> list[str]:
    """Check `pkg://a.b` or a file path (verl's load_module forms), and optionally an attribute of it."""
    try:
        if path.startswith("pkg://"):
            module = importlib.import_module(path[len("pkg://"):].replace("/", "."))
        else:
            file = Path(path.removeprefix("file://"))
            if not file.is_file():
                return [f"'{what}' = {path}: file not found"]
            spec = importlib.util.spec_from_file_location(f"_check_{file.stem}", file)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception as err:  # the import itself is what we check
        return [f"'{what}' = {path}: does not import ({type(err).__name__}: {err})"]
    if name and not hasattr(module, name):
        return [f"'{what}' = {path}: has no attribute '{name}'"]
    return []


def _check_tool_config(path: str) -> list[str]:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema

    key = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
    if not Path(path).is_file():
        return [f"'{key}' = {path}: file not found"]
    tools = (yaml_parser.safe_load(Path(path).read_text()) or {}).get("tools")
    if not tools:
        return [f"{path}: needs a non-empty 'tools:' list (verl tool registry format)"]
    errors = []
    for i, tool in enumerate(tools):
        where = f"{path} tools[{i}]"
        module, _, cls = str(tool.get("class_name", "")).rpartition(".")
        try:
            klass = getattr(importlib.import_module(module), cls)
            if not issubclass(klass, BaseTool):
                errors.append(f"{where}: class_name {tool['class_name']} is not a verl BaseTool")
        except Exception as err:
            errors.append(f"{where}: class_name '{tool.get('class_name')}' does not import ({err})")
        if (tool.get("config") or {}).get("type") != "native":
            errors.append(f"{where}: config.type must be 'native' (the only tool type in verl 0.9.1)")
        try:
            OpenAIFunctionToolSchema.model_validate(tool.get("tool_schema"))
        except Exception as err:
            errors.append(f"{where}: tool_schema is not an OpenAI function schema ({str(err).splitlines()[0]})")
    return errors


def unpreparable(path: str) -> bool:
    """A folder under RL_MODELS_DIR that is missing and that verl_recipes/models.py does not prepare."""
    from verl_recipes.models import preparable

    folder = Path(path).expanduser().resolve()
    return folder.is_relative_to(models_dir()) and not (folder / "config.json").is_file() and not preparable(path)


def data_files(value) -> list[str]:
    """The files of `data.train_files` or `data.val_files`: one path or a list of paths."""
    return [str(v) for v in value] if isinstance(value, (list, ListConfig)) else [str(value)]


def files_and_imports(cfg: DictConfig, recipe: Recipe) -> list[str]:
    from verl_recipes.data.prepare import outputs

    errors = []
    prepared = {str(p) for ds in recipe.card_value("data", []) for p in outputs(ds)}
    vision = "vision_config" in hf_config(cfg.actor_rollout_ref.model.path)
    for key in ("data.train_files", "data.val_files"):
        for file in data_files(cfg.data[key.split(".")[1]]):
            path = Path(file).expanduser()
            if not path.exists() and file not in prepared:
                errors.append(f"'{key}' = {file}: not found, and no dataset in the card's `data:` list "
                              f"({recipe.card_value('data', [])}) produces it; see verl_recipes/data/")
            elif path.is_file() and path.suffix == ".parquet":  # reachable: its columns are what verl reads
                errors += [f"'{key}' = {file}: {p}; {GUIDE}" for p in column_problems(str(path), cfg, vision)]
    models = {"actor_rollout_ref.model.path": cfg.actor_rollout_ref.model.path}
    if cfg.reward.reward_model.enable:
        models["reward.reward_model.model_path"] = cfg.reward.reward_model.model_path
    for key, model in models.items():
        if model is None or model_config_dir(model) is None:
            folder = Path(str(model)).expanduser().resolve()
            hub_id = folder.relative_to(models_dir()) if folder.is_relative_to(models_dir()) else model
            errors.append(f"'{key}' = {model}: neither a local model folder nor a model with a committed config under "
                          f"models/ (add models/{hub_id}/config.json)")
        elif unpreparable(str(model)):
            errors.append(f"'{key}' = {model}: not prepared, and no row of GGUF_MODELS in verl_recipes/models.py "
                          f"prepares a model there")
    reward_fn = cfg.reward.custom_reward_function
    if reward_fn.path:
        errors += _import_object(str(reward_fn.path), reward_fn.name, "reward.custom_reward_function.path")
    if cfg.data.custom_cls.path:
        errors += _import_object(str(cfg.data.custom_cls.path), cfg.data.custom_cls.name, "data.custom_cls.path")
    multi_turn = cfg.actor_rollout_ref.rollout.multi_turn
    if multi_turn.tool_config_path:
        errors += _check_tool_config(str(multi_turn.tool_config_path))
    for key in ("function_tool_path",):
        if multi_turn[key] and not Path(str(multi_turn[key])).is_file():
            errors.append(f"'actor_rollout_ref.rollout.multi_turn.{key}' = {multi_turn[key]}: file not found")
    agent_cfg = cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path
    if agent_cfg and not Path(str(agent_cfg)).is_file():
        errors.append(f"'actor_rollout_ref.rollout.agent.agent_loop_config_path' = {agent_cfg}: file not found")
    for lib in [cfg.actor_rollout_ref.model.external_lib] if cfg.actor_rollout_ref.model.external_lib else []:
        if importlib.util.find_spec(str(lib)) is None:
            errors.append(f"'actor_rollout_ref.model.external_lib' = {lib}: module not found on PYTHONPATH")
    return errors

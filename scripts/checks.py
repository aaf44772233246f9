"""`make check`: prove a recipe is right for the installed verl, on CPU, before any GPU is spent.

Each check returns a list of error strings; every error names the key or file and says what to do.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import io
import warnings
from pathlib import Path

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from scripts import verl_keys
from scripts.async_rules import async_errors
from scripts.open_dict_rules import check as open_dict_errors
from scripts.catalog import Recipe, RecipeError, root
from scripts.compose import close_matches, compose, compose_verl_base, flatten, resolved, split_args
from scripts.entrypoints import base_config_name



# ---------------------------------------------------------------- helpers


def _defaults_entries(config_file: Path) -> list[str]:
    """The repo-internal configs a YAML file pulls in through its defaults list."""
    data = yaml.safe_load(config_file.read_text()) or {}
    out = []
    for entry in data.get("defaults") or []:
        if isinstance(entry, str) and entry.startswith(("/configs/", "/recipes/")):
            out.append(entry.lstrip("/"))
        elif isinstance(entry, dict):
            for group, choice in entry.items():
                group = group.replace("override ", "").strip().lstrip("/")
                if group.startswith("configs/") and isinstance(choice, str):
                    out.append(f"{group}/{choice}")
    return out


def own_files(config_name: str, extra: list[str] = ()) -> list[Path]:
    """Every file of ours that a recipe composes (recipe, parent versions, fragments), in order."""
    todo, seen = [config_name, *extra], []
    while todo:
        path = root() / f"{todo.pop(0)}.yaml"
        if path.is_file() and path not in seen:
            seen.append(path)
            todo.extend(_defaults_entries(path))
    return seen


def _where(key: str, files: list[Path], args: list[str]) -> str:
    """Name the place that sets a key: a file of ours or the command line."""
    if any(a.lstrip("+~").split("=", 1)[0] == key for a in args):
        return "ARGS"
    for path in files:
        if key in flatten(OmegaConf.load(path)):
            return str(path.relative_to(root()))
    return "the composed config"


def _cli_group_choices(args: list[str]) -> list[str]:
    """`configs/profiling=nsys_discrete` or `+configs/smoke=tiny` on the command line pull in our files too."""
    out = []
    for arg in args:
        key, _, value = arg.lstrip("+~").partition("=")
        if key.startswith("configs/") and value:
            out.append(f"{key}/{value}")
    return out


# ---------------------------------------------------------------- schema and legacy keys


def unknown_and_ignored_keys(cfg: DictConfig, base: DictConfig, files: list[Path], args: list[str]) -> list[str]:
    """Keys verl's schema lacks (Hydra accepts typos inside YAML files) and keys 0.9.1 accepts but ignores."""
    known, base_flat = set(flatten(base)), flatten(base)
    known_list = sorted(known)
    errors = []
    for key, value in flatten(cfg).items():
        advice = verl_keys.ignored_replacement(key)
        if advice and value != base_flat.get(key) and value not in (None, {}):
            errors.append(f"{_where(key, files, args)}: '{key}' is accepted but ignored by verl "
                          f"{verl_keys.VERL_VERSION}; use {advice}")
        elif key not in known and not verl_keys.is_open(key) and key not in verl_keys.READ_BUT_UNDECLARED:
            hint = verl_keys.removed_replacement(key)
            hint = hint or (f"did you mean {', '.join(close_matches(key, known_list))}?" if close_matches(key, known_list) else
                            "remove it, or if verl passes this block through, add its pattern to scripts/verl_keys.py OPEN_DICTS")
            errors.append(f"{_where(key, files, args)}: '{key}' is not a key of verl {verl_keys.VERL_VERSION}'s "
                          f"config ({hint})")
    return errors


# ---------------------------------------------------------------- cross-field rules verl checks only after start-up


def _sp(cfg: DictConfig) -> int:
    if cfg.model_engine == "megatron":
        return int(cfg.actor_rollout_ref.actor.megatron.context_parallel_size)
    return int(cfg.actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size)


def token_budgets(cfg: DictConfig) -> list[str]:
    """A sequence longer than a micro-batch budget aborts the run (verl utils/seqlen_balancing.py assert)."""
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    arr, sp = cfg.actor_rollout_ref, _sp(cfg)
    budgets = {
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": (arr.actor.use_dynamic_bsz, arr.actor.ppo_max_token_len_per_gpu),
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": (arr.ref.log_prob_use_dynamic_bsz, arr.ref.log_prob_max_token_len_per_gpu),
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": (
            arr.rollout.log_prob_use_dynamic_bsz, arr.rollout.log_prob_max_token_len_per_gpu),
    }
    errors = []
    for key, (enabled, budget) in budgets.items():
        if enabled and budget * sp < longest:
            errors.append(f"'{key}' = {budget} (x SP/CP {sp}) is smaller than the longest sequence, "
                          f"data.max_prompt_length + data.max_response_length = {longest}: verl would abort on the "
                          f"first long sample; raise it to at least {-(-longest // sp)} (e.g. ${{tokens:2}})")
    rollout = arr.rollout
    if not rollout.enable_chunked_prefill and rollout.max_num_batched_tokens < longest:
        errors.append(f"'actor_rollout_ref.rollout.max_num_batched_tokens' = {rollout.max_num_batched_tokens} < {longest} "
                      "with chunked prefill off: vLLM refuses to start; raise it or set enable_chunked_prefill=true")
    if rollout.max_model_len is not None and rollout.max_model_len < longest:
        errors.append(f"'actor_rollout_ref.rollout.max_model_len' = {rollout.max_model_len} < {longest} "
                      "(max prompt + max response): long samples would be cut by vLLM")
    return errors


def vision_freeze(cfg: DictConfig) -> list[str]:
    """The freeze fragment must go with a vision model: freezing a text model is a silent no-op."""
    freezes = "scripts.freeze_vision" in str(cfg.actor_rollout_ref.model.get("external_lib") or "")
    if freezes and _hf_config(cfg.actor_rollout_ref.model.path).get("vision_config") is None:
        return ["configs/vision/frozen is set but the model has no vision_config: drop the fragment"]
    return []


def fused_kernels(cfg: DictConfig) -> list[str]:
    """verl 0.9.1's fused log-prob kernels fail on a vision-language model under FSDP2: its Qwen-VL forward multiplies
    by lm_head.weight while that is still a sharded DTensor ("aten.mm.default got mixed torch.Tensor and DTensor" in
    compute_log_prob; found by the deepeyes and geo3k tiny smokes on an H200, 2026-11-21/22)."""
    model, actor = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
    if (model.get("use_fused_kernels") and actor.get("strategy") == "fsdp2"
            and _hf_config(model.path).get("vision_config") is not None):
        return ["'actor_rollout_ref.model.use_fused_kernels' = true fails for a vision-language model on FSDP2 in verl "
                "0.9.1 (compute_log_prob: mixed torch.Tensor and DTensor): drop configs/kernels/fused"]
    return []


def chat_template(cfg: DictConfig) -> list[str]:
    """verl applies model.custom_chat_template to the tokenizer and processor at start-up: it must compile."""
    from jinja2 import TemplateError
    from transformers.utils.chat_template_utils import _compile_jinja_template

    template = cfg.actor_rollout_ref.model.custom_chat_template
    if template is None:
        return []
    try:
        _compile_jinja_template(template)
    except TemplateError as err:
        return [f"'actor_rollout_ref.model.custom_chat_template' is not a valid Jinja template: {err}"]
    return []


# ---------------------------------------------------------------- files and python paths


def _model_config_dir(model_path: str) -> Path | None:
    local = Path(str(model_path)).expanduser()
    if (local / "config.json").is_file():
        return local
    committed = root() / "models" / str(model_path)
    return committed if (committed / "config.json").is_file() else None


def _hf_config(model_path: str) -> dict:
    folder = _model_config_dir(model_path)
    return yaml.safe_load((folder / "config.json").read_text()) if folder else {}


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
    tools = (yaml.safe_load(Path(path).read_text()) or {}).get("tools")
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


def _data_files(value) -> list[str]:
    return [str(v) for v in value] if isinstance(value, (list, ListConfig)) else [str(value)]


def files_and_imports(cfg: DictConfig, recipe: Recipe) -> list[str]:
    from scripts.data.prepare import outputs

    errors = []
    prepared = {str(p) for ds in recipe.card_value("data", []) for p in outputs(ds)}
    for key in ("data.train_files", "data.val_files"):
        for file in _data_files(cfg.data[key.split(".")[1]]):
            if not Path(file).expanduser().exists() and file not in prepared:
                errors.append(f"'{key}' = {file}: not found, and no dataset in the card's `data:` list "
                              f"({recipe.card_value('data', [])}) produces it; see scripts/data/")
    model = cfg.actor_rollout_ref.model.path
    if _model_config_dir(model) is None:
        errors.append(f"'actor_rollout_ref.model.path' = {model}: neither a local model folder nor a model with a "
                      f"committed config under models/ (add models/{model}/config.json)")
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


# ---------------------------------------------------------------- verl's typed configs and validate_config


def _ref_as_verl_builds_it(ref: DictConfig, actor: DictConfig) -> DictConfig:
    """verl's engine worker renames the ref's log-prob keys before building it (workers/engine_workers.py)."""
    ref = copy.deepcopy(ref)
    with open_dict(ref):
        ref.ppo_mini_batch_size = actor.ppo_mini_batch_size
        ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
        ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
        ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
        ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
    return ref


def _profiler_nodes(cfg: DictConfig) -> dict:
    """Each role's profiler, and its tool's config when a tool is chosen, as the workers build them."""
    from verl.utils.profiler import ProfilerConfig

    out = {}
    for role in ("actor", "ref", "rollout"):
        node = cfg.actor_rollout_ref[role].get("profiler")
        if node is None:
            continue
        out[f"actor_rollout_ref.{role}.profiler"] = (node, ProfilerConfig)
        tool = node.get("tool")
        if tool in ("nsys", "torch", "torch_memory", "npu") and tool in (node.get("tool_config") or {}):
            out[f"actor_rollout_ref.{role}.profiler.tool_config.{tool}"] = (node.tool_config[tool], None)
    return out


def typed_configs(cfg: DictConfig) -> list[str]:
    """Build the dataclasses verl's workers build, and run verl's own validate_config for the declared topology."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    work = copy.deepcopy(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # verl warns that GRPO has no critic; that is the point of GRPO
        use_critic, use_ref = need_critic(work), need_reference_policy(work)
    arr = work.actor_rollout_ref
    nodes = {"actor_rollout_ref.rollout": (arr.rollout, None), "algorithm": (work.algorithm, None),
             "actor_rollout_ref.rollout.checkpoint_engine": (arr.rollout.checkpoint_engine, None)}
    if use_ref:
        nodes["actor_rollout_ref.ref"] = (_ref_as_verl_builds_it(arr.ref, arr.actor), None)
    if use_critic:
        nodes["critic"] = (work.critic, None)
    if work.trainer.v1.trainer_mode == "separate_async":
        nodes["trainer.v1.separate_async.hybrid_rollout"] = (work.trainer.v1.separate_async.hybrid_rollout, None)
    nodes.update(_profiler_nodes(work))
    model_dir = _model_config_dir(arr.model.path)
    if model_dir is not None:  # files_and_imports reports a model without a config
        model = copy.deepcopy(arr.model)
        # no tokenizer is loaded here, so no chat template can be set on one (chat_template compiles it)
        model.path, model.load_tokenizer, model.external_lib = str(model_dir), False, None
        model.custom_chat_template = None
        nodes["actor_rollout_ref.model"] = (model, None)
    errors = []
    for key, (node, dataclass_type) in nodes.items():
        try:
            omega_conf_to_dataclass(node, dataclass_type=dataclass_type) if dataclass_type else omega_conf_to_dataclass(node)
        except Exception as err:
            errors.append(f"'{key}': verl cannot build its config: {_first_line(err)}")
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_config(work, use_reference_policy=use_ref, use_critic=use_critic)
    except Exception as err:
        gpus = work.trainer.nnodes * work.trainer.n_gpus_per_node
        errors.append(f"verl validate_config failed for the declared topology ({gpus} GPUs = trainer.nnodes x "
                      f"trainer.n_gpus_per_node): {_first_line(err)}")
    return errors


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    cause = err.__cause__
    if cause is not None and str(cause):
        text = f"{text.splitlines()[0]} <- {str(cause).strip().splitlines()[0]}"
    return text.splitlines()[0] if text else type(err).__name__


# ---------------------------------------------------------------- memory and layout, before any GPU is allocated


def memory_plan(cfg: DictConfig, recipe: Recipe):
    """The planner's verdict for the declared topology, on the card's GPU memory (default 80 GiB); None without a model config."""
    from scripts.planner import plan

    hf_config = _hf_config(cfg.actor_rollout_ref.model.path)
    if not hf_config:
        return None  # files_and_imports reports the missing model config
    return plan(cfg, hf_config, gpu_memory_gib=float(recipe.card_value("gpu_memory_gib", 80)))


def plan_errors(cfg: DictConfig, recipe: Recipe) -> list[str]:
    result = memory_plan(cfg, recipe)
    if result is None:
        return []
    return list(result.errors) + ([] if result.fits else [f"planner: {result.verdict} (make {recipe.name}-plan)"])


# ---------------------------------------------------------------- all of it


def check(recipe: Recipe, args: str | list[str] | None = None) -> list[str]:
    """Every error for one recipe (with the user's ARGS); an empty list means proven."""
    arg_list = split_args(args)
    try:
        raw = compose(recipe, arg_list, resolve=False)  # interpolations kept, so keys compare like verl's own
        cfg = resolved(raw, recipe)
    except RecipeError as err:
        return [str(err)]
    base = compose_verl_base(base_config_name(recipe.entrypoint), cfg.model_engine)
    files = own_files(recipe.config_name, _cli_group_choices(arg_list))
    errors = unknown_and_ignored_keys(raw, base, files, arg_list)
    errors += token_budgets(cfg)
    errors += vision_freeze(cfg)
    errors += fused_kernels(cfg)
    errors += chat_template(cfg)
    errors += files_and_imports(cfg, recipe)
    errors += typed_configs(cfg)
    errors += open_dict_errors(cfg)
    errors += async_errors(cfg, recipe.entrypoint)
    errors += plan_errors(cfg, recipe)
    return [f"{recipe.label}: {e}" for e in errors]

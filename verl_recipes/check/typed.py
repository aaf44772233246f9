"""verl's own config validation: build the dataclasses verl's workers build, and run verl's validate_config for the
declared topology."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import warnings

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_recipes.catalog import model_config_dir
from verl_recipes.config_copy import copy_config


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


# Every other section's dataclass reads nothing but the section (no files, no environment), so it is built once per
# content in a process: make check builds the same rollout, algorithm and profiler sections for many of its 116 runs
# (a quarter of its time went to building them, 2026-11-29). The model's config reads the model's files, and the
# critic's holds a model: those two are built every time.
READS_FILES = {"actor_rollout_ref.model", "critic"}
_builds: dict[tuple, str | None] = {}


def _build(node: DictConfig, dataclass_type) -> str | None:
    """verl's omega_conf_to_dataclass on the section: None, or why it cannot build it."""
    from verl.utils.config import omega_conf_to_dataclass

    try:
        omega_conf_to_dataclass(node, dataclass_type=dataclass_type) if dataclass_type else omega_conf_to_dataclass(node)
    except Exception as err:
        return _first_line(err)
    return None


def _built(node: DictConfig, dataclass_type) -> str | None:
    """_build, once per section content and dataclass in this process."""
    key = (dataclass_type, json.dumps(OmegaConf.to_container(node, resolve=True), sort_keys=True, default=repr))
    if key not in _builds:
        _builds[key] = _build(node, dataclass_type)
    return _builds[key]


def typed_configs(cfg: DictConfig) -> list[str]:
    """Build the dataclasses verl's workers build, and run verl's own validate_config for the declared topology."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    work = copy_config(cfg)
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
    if work.reward.reward_model.enable:  # verl serves it with its own rollout config
        nodes["reward.reward_model.rollout"] = (work.reward.reward_model.rollout, None)
    if work.trainer.v1.trainer_mode == "separate_async":
        nodes["trainer.v1.separate_async.hybrid_rollout"] = (work.trainer.v1.separate_async.hybrid_rollout, None)
    nodes.update(_profiler_nodes(work))
    model_dir = model_config_dir(arr.model.path)
    if model_dir is not None:  # files_and_imports reports a model without a config
        model = copy.deepcopy(arr.model)
        # no tokenizer is loaded here, so no chat template can be set on one (chat_template compiles it)
        model.path, model.load_tokenizer, model.external_lib = str(model_dir), False, None
        model.custom_chat_template = None
        nodes["actor_rollout_ref.model"] = (model, None)
    errors = []
    for key, (node, dataclass_type) in nodes.items():
        problem = _build(node, dataclass_type) if key in READS_FILES else _built(node, dataclass_type)
        if problem:
            errors.append(f"'{key}': verl cannot build its config: {problem}")
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

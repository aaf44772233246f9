"""What we know about verl 0.9.1's config keys beyond its schema (see ../shared guide, findings 1-3, 7).

One table per kind of trap; checks.py and compose.py read them, the README links here.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from omegaconf import DictConfig

VERL_VERSION = "0.9.1"

# Free-form dicts: verl passes their contents through (to vLLM, transformers, Megatron, reward functions),
# so a key below them is not in the schema and cannot be checked against it.
OPEN_DICTS = (
    "*.engine_kwargs.*",
    "*.override_config.*",
    "*.override_transformer_config.*",
    "*.override_optimizer_config.*",
    "*.override_ddp_config.*",
    "*.fused_kernel_options.*",
    "reward.reward_kwargs.*",
    "reward.custom_reward_function.reward_kwargs.*",
    "ray_kwargs.*",
    "data.apply_chat_template_kwargs.*",
    "data.mm_processor_kwargs.*",
    "trainer.v1.sampler.sampler_kwargs.*",
    "global_profiler.global_tool_config.nsys.*_nsight_options.*",
)

# Keys that verl 0.9.1 reads although its yaml lacks them (so they need `+` on the command line).
READ_BUT_UNDECLARED = {
    "actor_rollout_ref.rollout.limit_images": "read by vllm_async_server (verl PR 7430)",
}

# Keys that 0.9.1 accepts and then ignores: setting them is always a mistake.
# prefix -> what to use instead.
ACCEPTED_BUT_IGNORED = {
    "custom_reward_function.": "reward.custom_reward_function.{path,name} (main_ppo ignores the top-level block)",
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.reward_kwargs.": "+reward.reward_kwargs.* (e.g. +reward.reward_kwargs.overlong_buffer_cfg.enable)",
    "reward_model.": "reward.reward_model.* (main_ppo ignores the legacy top-level reward_model block)",
    "sandbox_fusion.": "reward.sandbox_fusion.* (or our local sandbox in agents/)",
    "actor_rollout_ref.actor.freeze_vision_tower": (
        "the fragment configs/vision/frozen (verl 0.9.1 reads freeze_vision_tower nowhere, so the ViT would train)"
    ),
}

# Keys that 0.9.1 rejects, with their replacement: used to turn Hydra's "Could not override" into advice.
REMOVED = {
    "actor_rollout_ref.actor.megatron.grad_offload": "removed in 0.9.1; use megatron.optimizer_offload or "
    "+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_offload_fraction",
    "actor_rollout_ref.ref.megatron.grad_offload": "removed in 0.9.1; drop it",
    "critic.megatron.grad_offload": "removed in 0.9.1; drop it",
    "actor_rollout_ref.actor.fsdp_config.grad_offload": "not a key; use actor_rollout_ref.actor.fsdp_config.optimizer_offload",
    "actor_rollout_ref.actor.model_engine": "model_engine=megatron (a top-level group)",
    "actor_rollout_ref.actor.router_replay": "actor_rollout_ref.actor.megatron.router_replay.*",
    "actor_rollout_ref.rollout.update_weights_bucket_megabytes": "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes",
    "actor_rollout_ref.rollout.skip_rollout": "skip.rollout.enable",
    "actor_rollout_ref.model.freeze_vision_tower": "the fragment configs/vision/frozen",
    "actor_rollout_ref.model.freeze_module_pattern": "the fragment configs/vision/frozen",
    "trainer.profile_steps": "global_profiler.steps",
    "trainer.controller_nsight_options": "global_profiler.global_tool_config.nsys.controller_nsight_options",
    "trainer.worker_nsight_options": "global_profiler.global_tool_config.nsys.worker_nsight_options",
    "global_profiler.discrete": "global_profiler.global_tool_config.nsys.discrete",
    "critic.model.fsdp_config": "critic.fsdp.*",
    "reward_model.overlong_buffer": "+reward.reward_kwargs.overlong_buffer_cfg.* with reward.reward_manager.name=dapo",
    "reward_model.profiler": "actor_rollout_ref.actor.profiler.* (reward has no profiler block)",
    "async_training.use_rollout_log_probs": "actor_rollout_ref.actor.use_rollout_log_probs",
    "actor_rollout_ref.rollout.test_freq": "trainer.test_freq",
    "rollout.test_freq": "trainer.test_freq",
    "rollout.total_epochs": "trainer.total_epochs",
    "data.continuous_token": "removed in 0.9.1; drop it",
    "actor_rollout_ref.rollout.multi_turn.interaction_config_path": "removed in 0.9.1; drop it",
}


def is_open(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in OPEN_DICTS)


def ignored_replacement(key: str) -> str | None:
    """The advice for a key 0.9.1 accepts but ignores, or None."""
    for prefix, advice in ACCEPTED_BUT_IGNORED.items():
        if key == prefix.rstrip(".") or key.startswith(prefix):
            return advice
    return None


def removed_replacement(key: str) -> str | None:
    for old, advice in REMOVED.items():
        if key == old or key.startswith(old + "."):
            return advice
    return None


def unknown_and_ignored_keys(cfg: DictConfig, base: DictConfig, files: list[Path], args: list[str]) -> list[str]:
    """Keys verl's schema lacks (Hydra accepts typos inside YAML files) and keys 0.9.1 accepts but ignores."""
    from verl_recipes.compose import close_matches, flatten, where_set  # compose reads the tables above

    known, base_flat = set(flatten(base)), flatten(base)
    known_list = sorted(known)
    errors = []
    for key, value in flatten(cfg).items():
        advice = ignored_replacement(key)
        if advice and value != base_flat.get(key) and value not in (None, {}):
            errors.append(f"{where_set(key, files, args)}: '{key}' is accepted but ignored by verl "
                          f"{VERL_VERSION}; use {advice}")
        elif key not in known and not is_open(key) and key not in READ_BUT_UNDECLARED:
            hint = removed_replacement(key)
            hint = hint or (f"did you mean {', '.join(close_matches(key, known_list))}?" if close_matches(key, known_list) else
                            "remove it, or if verl passes this block through, add its pattern to verl_recipes/check/keys.py OPEN_DICTS")
            errors.append(f"{where_set(key, files, args)}: '{key}' is not a key of verl {VERL_VERSION}'s "
                          f"config ({hint})")
    return errors

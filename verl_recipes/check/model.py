"""Rules about the model a recipe trains: its vision tower, the fused kernels it can take, its chat template."""

from __future__ import annotations

from omegaconf import DictConfig

from verl_recipes.catalog import hf_config


def vision_freeze(cfg: DictConfig) -> list[str]:
    """The freeze fragment must reach a vision tower on the engine that builds it. verl_recipes.runtime.freeze_vision
    refuses what it cannot freeze only when the engine builds the model, minutes into a launch; the same refusals here:
    a text model (nothing to freeze), Megatron without Megatron-Bridge's provider (the hook registers on it), FSDP1
    without use_orig_params (it cannot mix frozen and trainable parameters)."""
    if "verl_recipes.runtime.freeze_vision" not in str(cfg.actor_rollout_ref.model.get("external_lib") or ""):
        return []
    if hf_config(cfg.actor_rollout_ref.model.path).get("vision_config") is None:
        return ["configs/vision/frozen is set but the model has no vision_config: drop the fragment"]
    actor = cfg.actor_rollout_ref.actor
    if cfg.model_engine == "megatron" and actor.megatron.get("vanilla_mbridge"):
        return ["'actor_rollout_ref.actor.megatron.vanilla_mbridge' = true: configs/vision/frozen freezes the tower "
                "through a Megatron-Bridge pre-wrap hook, and the vanilla mbridge builds no Megatron-Bridge provider; "
                "set it false"]
    if cfg.model_engine == "dp" and actor.strategy == "fsdp" and not actor.fsdp_config.get("use_orig_params"):
        return ["'actor_rollout_ref.actor.strategy' = fsdp with fsdp_config.use_orig_params = false cannot hold the "
                "frozen tower and the trainable model in one FlatParameter: set actor_rollout_ref.actor.strategy=fsdp2 "
                "or actor_rollout_ref.actor.fsdp_config.use_orig_params=true"]
    return []


def fused_kernels(cfg: DictConfig) -> list[str]:
    """verl 0.9.1's fused log-prob kernels fail on a vision-language model under FSDP2: its Qwen-VL forward multiplies
    by lm_head.weight while that is still a sharded DTensor ("aten.mm.default got mixed torch.Tensor and DTensor" in
    compute_log_prob; found by the deepeyes and geo3k tiny smokes on an H200, 2026-11-21/22)."""
    model, actor = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
    if (model.get("use_fused_kernels") and actor.get("strategy") == "fsdp2"
            and hf_config(model.path).get("vision_config") is not None):
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

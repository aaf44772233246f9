"""Rules about the model a recipe trains: its vision tower, the fused kernels it can take, its chat template."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

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


def megatron_language_model(cfg: DictConfig) -> list[str]:
    """A VL model on Megatron must say that its language model trains. Megatron-Bridge's providers apply their own
    freeze flags when they build the model, and 0.5.1's Qwen3-VL-MoE provider defaults freeze_language_model to True
    (models/qwen_vl/qwen3_vl_provider.py): verl would train only the vision merger, silently. Found by the
    qwen3-vl-30b-a3b tiny smoke (4 x H100, 2026-11-26), where configs/vision/frozen then left nothing to train."""
    if cfg.model_engine != "megatron" or hf_config(cfg.actor_rollout_ref.model.path).get("vision_config") is None:
        return []
    overrides = cfg.actor_rollout_ref.actor.megatron.get("override_transformer_config") or {}
    if overrides.get("freeze_language_model") is False:
        return []
    return ["'actor_rollout_ref.actor.megatron.override_transformer_config.freeze_language_model' is not false: "
            "Megatron-Bridge 0.5.1 freezes the language model of Qwen3-VL-MoE by default, so only the vision merger "
            "would train; set it false (configs/megatron/vl_language_model)"]


def fused_kernels(cfg: DictConfig) -> list[str]:
    """verl 0.9.1's fused log-prob kernels fail under FSDP2 wherever lm_head is its own FSDP unit: with untied word
    embeddings verl wraps lm_head apart (utils/fsdp_utils.py), and the fused forward multiplies by lm_head.weight
    without calling lm_head, so the weight is still a sharded DTensor ("aten.mm.default got mixed torch.Tensor and
    DTensor"). Found on Qwen-VL by the deepeyes and geo3k tiny smokes (H200, 2026-11-21/22) and on the Qwen2.5-7B
    shape by bench/actor_update.py (H200, 2026-11-24); a tied model (Qwen2.5-1.5B) runs."""
    model, actor = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
    if not (model.get("use_fused_kernels") and actor.get("strategy") == "fsdp2"):
        return []
    config = hf_config(model.path)
    tied = (config.get("text_config") or {}).get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    if config.get("vision_config") is not None or not tied:
        return ["'actor_rollout_ref.model.use_fused_kernels' = true fails on FSDP2 in verl 0.9.1 for a model with an "
                "untied lm_head or a vision tower (mixed torch.Tensor and DTensor in the fused forward): drop "
                "configs/kernels/fused (without flash-attn, +configs/attention=torch_varlen's chunked log-probs are "
                "as fast: bench/README.md)"]
    return []


WITHOUT_FLASH_ATTN = "verl_recipes.runtime.without_flash_attn"
EXTERNAL_MODULES = "ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES"


def without_flash_attn_loaded(cfg: DictConfig) -> bool:
    """Whether every worker imports WITHOUT_FLASH_ATTN at `import verl` (the configs/attention fragments set it)."""
    return WITHOUT_FLASH_ATTN in str(OmegaConf.select(cfg, EXTERNAL_MODULES, default=None) or "")


def attention(cfg: DictConfig) -> list[str]:
    """attn_implementation=torch_varlen (configs/attention/torch_varlen) is ours: it exists in a worker only where
    verl_recipes.runtime.without_flash_attn is loaded, it is causal (no vision tower), and verl's Ulysses all-to-all
    patches flash-attn's function, not ours."""
    model = cfg.actor_rollout_ref.model
    if model.override_config.get("attn_implementation") != "torch_varlen":
        return []
    errors = []
    if not without_flash_attn_loaded(cfg):
        errors.append("'actor_rollout_ref.model.override_config.attn_implementation' = torch_varlen is registered only by "
                      f"{WITHOUT_FLASH_ATTN}, which {EXTERNAL_MODULES} "
                      "does not name: use +configs/attention=torch_varlen rather than setting the key alone")
    if hf_config(model.path).get("vision_config") is not None:
        errors.append("'actor_rollout_ref.model.override_config.attn_implementation' = torch_varlen is causal-only and "
                      "a vision tower attends bidirectionally: use +configs/attention=sdpa_padded for a VL model")
    for role in ("actor", "ref"):
        sp = cfg.actor_rollout_ref[role].get("fsdp_config", {}).get("ulysses_sequence_parallel_size", 1) or 1
        if sp > 1:
            errors.append(f"'actor_rollout_ref.{role}.fsdp_config.ulysses_sequence_parallel_size' = {sp} needs "
                          "flash-attn (verl patches its attention function for the all-to-all); torch_varlen has none: "
                          "install flash-attn or set it to 1")
    return errors


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

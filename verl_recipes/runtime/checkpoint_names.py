"""The actor's weights reach an SGLang rollout under the names of the model's checkpoint, as verl 0.9.1 intends.

Before verl sends the actor's weights to the rollout engine, it renames them back to checkpoint names
(verl.utils.model.convert_weight_keys, called by the FSDP engine's weight export) from the model class's
`_checkpoint_conversion_mapping`, which transformers 4 kept. transformers 5 dropped that attribute for its own
conversion registry (transformers/conversion_mapping.py), so verl renames nothing, and Qwen2.5-VL's weights leave as
`model.visual.*` and `model.language_model.*`. vLLM's loader takes both forms. SGLang 0.5.12's Qwen2.5-VL loader
knows only the checkpoint's `visual.*` and `model.*`: the tiny SGLang smoke died in its first weight sync on
KeyError 'model.visual.blocks.0.mlp.gate_up_proj.weight' (update_weights_from_tensor, 1 x H200, 2026-11-29), and
its loader skips, without a word, any unfused weight whose name it does not know (the norms).

For a model without the attribute, this sets it from the renamings that transformers 5 registers for the model's
class (then its model_type, in transformers' order), so verl's own rename runs again: Qwen2-VL and Qwen2.5-VL. The
class is the transformers one under FSDP2's FSDP<name> subclass.
A model whose registered transforms also fuse tensors (the MoE experts) or that has none (Qwen2, Qwen3, Qwen3-VL,
whose checkpoints carry the new names) keeps its names.

verl loads this module in every process (the `verl.plugins` entry point in pyproject.toml); it does nothing unless
NAMES_ENV is set, which configs/rollout/sglang does for a run's Ray workers, so the vLLM runs keep the names they
were proven with.
"""

from __future__ import annotations

import os

from verl_recipes.runtime.after_import import after_import

NAMES_ENV = "VERL_RECIPES_CHECKPOINT_NAMES"
MODULE = "verl.workers.engine.fsdp.transformer_impl"  # binds convert_weight_keys by name: patch it there
MARK = "_checkpoint_names"


def registered_renamings(model) -> dict[str, str]:
    """{checkpoint pattern: model name} of transformers' registered transforms for `model`, when all are renamings."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    from transformers.core_model_loading import WeightRenaming

    transforms = get_checkpoint_conversion_mapping(transformers_class(model).__name__)
    if transforms is None:
        transforms = get_checkpoint_conversion_mapping(getattr(model.config, "model_type", None)) or []
    if not all(type(t) is WeightRenaming for t in transforms):
        return {}
    return {source: target for t in transforms for source, target in zip(t.source_patterns, t.target_patterns)}


def transformers_class(model) -> type:
    """The model's transformers class: FSDP2 swaps a sharded module's class for a subclass of it, FSDP<name>, which no
    registry knows (verl's FSDP engine hands convert_weight_keys that module)."""
    return next((cls for cls in type(model).__mro__ if cls.__module__.startswith("transformers.")), type(model))


def with_checkpoint_names(convert):
    """verl's convert_weight_keys, given the renamings of a model that transformers 5 left without them."""

    def convert_weight_keys(state_dict, model):
        if not hasattr(model, "_checkpoint_conversion_mapping"):  # looked up once a model; {} renames nothing
            model._checkpoint_conversion_mapping = registered_renamings(model)
        return convert(state_dict, model)

    setattr(convert_weight_keys, MARK, True)
    return convert_weight_keys


def patch(module) -> None:
    if not hasattr(module.convert_weight_keys, MARK):
        module.convert_weight_keys = with_checkpoint_names(module.convert_weight_keys)


if os.environ.get(NAMES_ENV):
    after_import(MODULE, patch)

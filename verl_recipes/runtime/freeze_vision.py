"""Really freeze the vision tower (ViT blocks and merger/projector) of Qwen2.5-VL and Qwen3-VL on verl 0.9.1.

verl 0.9.1 accepts `actor_rollout_ref.actor.freeze_vision_tower` but nothing reads it, so the vision tower
trains. This module is the working replacement, switched on by one verl key:

    actor_rollout_ref.model.external_lib=verl_recipes.runtime.freeze_vision

`HFModelConfig.__post_init__` imports every `external_lib`, so this module is imported in each process that
builds the model config: the trainer driver and every ActorRolloutRefWorker in its `init_model`, before any
engine builds its model. On import it wraps three verl symbols:

- `FSDPEngine._build_module` (verl/workers/engine/fsdp/transformer_impl.py) returns the bare HF model, before
  LoRA, QAT, FSDP wrapping and `_build_optimizer`. Vision parameters frozen here never get a `.grad`, and
  torch AdamW skips parameters whose grad is None, so weight decay cannot move them either.
- `MegatronEngine._build_megatron_module` (verl/workers/engine/megatron/transformer_impl.py) registers a
  Megatron-Bridge pre-wrap hook that freezes before DDP wrapping; Megatron's DDP grad buffers and its
  (distributed) optimizer only take parameters with requires_grad=True.
- `EngineRegistry.new` refuses the other training backends, which the two wrappers above do not reach, so
  the freeze can never be a silent no-op again.

Only training engines whose model config names this module in `external_lib` are frozen: the forward-only
reference engine and a critic that shares the process are left alone.
"""

from dataclasses import dataclass

import torch
import verl
import verl.workers.engine as verl_engines

TESTED_VERL_VERSION = "0.9.1"
# Qwen2.5-VL / Qwen3-VL keep the whole tower, merger and deepstack mergers included, under `visual` in HF
# transformers and Megatron-Bridge's Qwen2.5-VL; Megatron-Bridge's own Qwen3-VL calls it `vision_model`.
VISION_TOWER_NAMES = ("visual", "vision_model")
# Model types checked to keep their projector inside that tower. Others (e.g. LLaVA's multi_modal_projector)
# would be frozen only in part, so they are refused until checked.
SUPPORTED_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
TRAINING_BACKENDS = ("fsdp", "fsdp2", "megatron")


class VisionFreezeError(RuntimeError):
    """The vision tower could not be frozen as configured."""


@dataclass(frozen=True)
class FreezeReport:
    towers: tuple[str, ...]
    frozen_tensors: int
    frozen_numel: int
    trainable_numel: int

    def describe(self) -> str:
        return (
            f"froze {self.frozen_tensors} vision tensors ({self.frozen_numel:,} params) under {list(self.towers)}; "
            f"{self.trainable_numel:,} params stay trainable"
        )


def find_vision_towers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Outermost submodules whose own name is one of VISION_TOWER_NAMES, by qualified name."""
    towers = {}
    for name, module in model.named_modules():
        is_tower = name.rsplit(".", 1)[-1] in VISION_TOWER_NAMES
        if is_tower and not any(name.startswith(tower + ".") for tower in towers):
            towers[name] = module
    return towers


def freeze_vision_tower(models: list[torch.nn.Module], *, require_tower: bool = True) -> FreezeReport:
    """Set requires_grad=False on every vision-tower parameter of `models` (Megatron passes model chunks).

    Raises VisionFreezeError when a tower is required but absent or empty, or when nothing is left to train.
    """
    towers = {}
    for index, model in enumerate(models):
        prefix = f"[{index}]." if len(models) > 1 else ""
        towers.update({prefix + name: module for name, module in find_vision_towers(model).items()})
    if not towers and require_tower:
        names = ", ".join(type(model).__name__ for model in models)
        raise VisionFreezeError(
            f"{names} has no vision tower (no submodule named one of {VISION_TOWER_NAMES}), so there is nothing to "
            f"freeze. Drop verl_recipes.runtime.freeze_vision from actor_rollout_ref.model.external_lib for text-only models."
        )
    frozen = {id(param): param for tower in towers.values() for param in tower.parameters()}
    if towers and not frozen:
        raise VisionFreezeError(f"vision tower(s) {list(towers)} hold no parameters; refusing a no-op freeze")
    for param in frozen.values():
        param.requires_grad_(False)
    trainable_numel = sum(param.numel() for model in models for param in model.parameters() if param.requires_grad)
    if trainable_numel == 0:
        raise VisionFreezeError(
            "freezing the vision tower left no trainable parameter in the model. On Megatron, Megatron-Bridge's "
            "provider freezes the language model of Qwen3-VL-MoE by default: add configs/megatron/vl_language_model "
            "(actor_rollout_ref.actor.megatron.override_transformer_config.freeze_language_model=false)"
        )
    return FreezeReport(
        towers=tuple(towers),
        frozen_tensors=len(frozen),
        frozen_numel=sum(param.numel() for param in frozen.values()),
        trainable_numel=trainable_numel,
    )


def names_this_module(external_lib) -> bool:
    """Whether verl's `model.external_lib` (a module name or a list of them) loads this module."""
    libs = [external_lib] if isinstance(external_lib, str) else list(external_lib or [])
    return __name__ in libs


def _wants_freeze(engine) -> bool:
    return not engine.engine_config.forward_only and names_this_module(engine.model_config.external_lib)


def _log(message: str) -> None:
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        print(f"[verl_recipes.runtime.freeze_vision] {message}", flush=True)


def check_model_type(model_config) -> None:
    model_type = getattr(model_config.hf_config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise VisionFreezeError(
            f"verl_recipes.runtime.freeze_vision supports model types {SUPPORTED_MODEL_TYPES}, not {model_type!r} "
            f"(actor_rollout_ref.model.path). Check where that model keeps its vision projector before adding it."
        )


def check_fsdp_strategy(engine_config) -> None:
    """FSDP1 flattens a wrap unit's parameters into one FlatParameter, which torch refuses to build from
    frozen and trainable tensors unless use_orig_params=True (verl's root unit mixes merger and embeddings)."""
    if engine_config.strategy == "fsdp" and not engine_config.use_orig_params:
        raise VisionFreezeError(
            "actor_rollout_ref.actor.strategy=fsdp (FSDP1) with fsdp_config.use_orig_params=False cannot mix frozen "
            "and trainable parameters. Set actor_rollout_ref.actor.strategy=fsdp2 (recommended) or "
            "actor_rollout_ref.actor.fsdp_config.use_orig_params=True."
        )


_ORIGINALS = {}  # (owner class, attribute name) -> the verl attribute before wrapping


def _patch(owner, name: str, make_wrapper) -> None:
    """Replace owner.<name> (as stored in the class, so classmethods stay classmethods) by make_wrapper(it)."""
    if (owner, name) in _ORIGINALS:
        return
    original = owner.__dict__.get(name)
    if original is None:
        raise ImportError(
            f"verl_recipes.runtime.freeze_vision wraps {owner.__module__}.{owner.__name__}.{name}, which verl {verl.__version__} "
            f"does not define (tested with verl {TESTED_VERL_VERSION}); the vision tower would not be frozen."
        )
    _ORIGINALS[(owner, name)] = original
    setattr(owner, name, make_wrapper(original))


def _wrap_fsdp_build_module(original):
    def build_module_with_frozen_vision(self):
        if not _wants_freeze(self):
            return original(self)
        check_model_type(self.model_config)
        check_fsdp_strategy(self.engine_config)
        module = original(self)
        _log(freeze_vision_tower([module]).describe())
        return module

    return build_module_with_frozen_vision


def megatron_pre_wrap_hook(is_first_pipeline_stage):
    """Megatron-Bridge pre-wrap hook: freeze the tower of the model chunks before DDP wraps them. Only the
    first pipeline stage holds the vision tower, so other stages may legitimately have none."""

    def freeze_vision_before_ddp(chunks):
        report = freeze_vision_tower(list(chunks), require_tower=is_first_pipeline_stage())
        _log(report.describe() if report.towers else "no vision tower on this pipeline stage")
        return chunks

    return freeze_vision_before_ddp


def _first_pipeline_stage() -> bool:
    from megatron.core import parallel_state

    return parallel_state.is_pipeline_first_stage(ignore_virtual=True)


def _wrap_megatron_build_module(original):
    def build_megatron_module_with_frozen_vision(self):
        if _wants_freeze(self):
            check_model_type(self.model_config)
            if self.provider is None:
                raise VisionFreezeError(
                    "verl_recipes.runtime.freeze_vision on Megatron freezes through the Megatron-Bridge provider, which "
                    "actor_rollout_ref.actor.megatron.vanilla_mbridge=True does not build; set it to False."
                )
            self.provider.register_pre_wrap_hook(megatron_pre_wrap_hook(_first_pipeline_stage))
        return original(self)

    return build_megatron_module_with_frozen_vision


def _wrap_registry_new(original: classmethod):
    def new_engine_with_backend_check(cls, model_type, backend, *args, **kwargs):
        engine_config = kwargs.get("engine_config")
        if (
            names_this_module(getattr(kwargs.get("model_config"), "external_lib", None))
            and not getattr(engine_config, "forward_only", False)
            and backend not in TRAINING_BACKENDS
        ):
            raise VisionFreezeError(
                f"verl_recipes.runtime.freeze_vision freezes the vision tower on backends {TRAINING_BACKENDS}, not {backend!r}; "
                f"choose one of them with actor_rollout_ref.actor.strategy or model_engine."
            )
        return original.__func__(cls, model_type, backend, *args, **kwargs)

    return classmethod(new_engine_with_backend_check)


def install() -> None:
    """Wrap the verl symbols named in the module docstring; idempotent."""
    if verl.__version__ != TESTED_VERL_VERSION:
        raise ImportError(
            f"verl_recipes.runtime.freeze_vision is verified against verl {TESTED_VERL_VERSION}, found verl {verl.__version__}. "
            f"Re-run tests/test_freeze_vision.py and tests/gpu/freeze_vision_check.py, then update TESTED_VERL_VERSION."
        )
    _patch(verl_engines.FSDPEngine, "_build_module", _wrap_fsdp_build_module)
    if verl_engines.MegatronEngine is not None:  # None when megatron-core is not installed
        _patch(verl_engines.MegatronEngine, "_build_megatron_module", _wrap_megatron_build_module)
    _patch(verl_engines.EngineRegistry, "new", _wrap_registry_new)


install()

"""verl_recipes.runtime.freeze_vision: the vision tower of Qwen2.5-VL / Qwen3-VL stays bit-identical through real training steps."""

import ast
import functools
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import verl
from omegaconf import OmegaConf
from transformers import AutoConfig, AutoModelForImageTextToText, Qwen2Config, Qwen2ForCausalLM
from verl.workers.config import FSDPOptimizerConfig
from verl.workers.config.optimizer import build_optimizer
from verl.workers.engine import EngineRegistry, FSDPEngine

import verl_recipes.runtime.freeze_vision as freeze_vision
from verl_recipes import catalog
from verl_recipes.check.model import megatron_language_model, vision_freeze
from verl_recipes.compose import compose
from verl_recipes.smoke.tiny import MODELS

REPO_ROOT = Path(__file__).resolve().parents[1]
CHECK_SCRIPT = REPO_ROOT / "tests" / "gpu" / "freeze_vision_check.py"
# The GPU check script makes the image inputs; load it by path (site-packages has its own `tests`).
_spec = importlib.util.spec_from_file_location("freeze_vision_check", CHECK_SCRIPT)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

MODEL_TYPES = ["qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"]


@functools.cache
def tiny_config(model_type):
    """The config of the smokes' tiny model of the family (verl_recipes/random_models.py)."""
    with tempfile.TemporaryDirectory() as folder:
        return AutoConfig.from_pretrained(MODELS[model_type](Path(folder)))


def tiny_model(model_type):
    torch.manual_seed(0)
    return AutoModelForImageTextToText.from_config(tiny_config(model_type))


def is_vision(name):
    return ".visual." in f".{name}"


def snapshot(model):
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def image_text_batch(config):
    generator = torch.Generator().manual_seed(0)
    image, patches = check.image_inputs(config, generator)
    input_ids = torch.cat([image, check.text_ids(config, 16, generator)]).unsqueeze(0)
    return dict(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        mm_token_type_ids=(input_ids == config.image_token_id).long(),
        pixel_values=patches,
        image_grid_thw=torch.tensor([check.IMAGE_GRID_THW]),
        labels=input_ids,
    )


def train_steps(model, steps=2):
    """What verl's FSDP engine does per step: optimizer over ALL parameters (build_optimizer(module.parameters())),
    AdamW with weight decay, zero_grad(set_to_none), backward, clip, step."""
    optimizer = build_optimizer(model.parameters(), FSDPOptimizerConfig(lr=1e-2, weight_decay=0.1))
    for _ in range(steps):
        optimizer.zero_grad()
        model(**image_text_batch(model.config)).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
    return optimizer


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_freeze_covers_whole_tower_including_mergers(model_type):
    model = tiny_model(model_type)
    vision_names = [name for name, _ in model.named_parameters() if is_vision(name)]

    report = freeze_vision.freeze_vision_tower([model])

    assert report.towers == ("model.visual",)
    assert report.frozen_tensors == len(vision_names)
    assert any(".merger." in name for name in vision_names)
    if model_type.startswith("qwen3_vl"):
        assert any(".deepstack_merger_list." in name for name in vision_names)
    for name, param in model.named_parameters():
        assert param.requires_grad is not is_vision(name), name
    assert report.trainable_numel == sum(p.numel() for n, p in model.named_parameters() if not is_vision(n))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("freeze", [True, False])
def test_training_step_keeps_frozen_tower_bit_identical(model_type, freeze):
    model = tiny_model(model_type)
    if freeze:
        freeze_vision.freeze_vision_tower([model])
    before = snapshot(model)

    optimizer = train_steps(model)

    after = snapshot(model)
    vision_unchanged = {name: torch.equal(before[name], after[name]) for name in before if is_vision(name)}
    language_changed = {name: not torch.equal(before[name], after[name]) for name in before if not is_vision(name)}
    assert all(language_changed.values()), [name for name, changed in language_changed.items() if not changed]
    if freeze:
        assert all(vision_unchanged.values()), [name for name, same in vision_unchanged.items() if not same]
        vision_params = [p for n, p in model.named_parameters() if is_vision(n)]
        assert all(p.grad is None for p in vision_params)
        assert not any(p in optimizer.state for p in vision_params)  # no AdamW moments kept for the tower
    else:  # control: without the freeze, weight decay and gradients move every vision tensor
        assert not any(vision_unchanged.values())


def test_text_only_model_fails_loudly():
    config = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    with pytest.raises(freeze_vision.VisionFreezeError, match="has no vision tower"):
        freeze_vision.freeze_vision_tower([Qwen2ForCausalLM(config)])


def test_tower_without_parameters_fails_loudly():
    model = torch.nn.Module()
    model.visual = torch.nn.Identity()
    model.language_model = torch.nn.Linear(2, 2)
    with pytest.raises(freeze_vision.VisionFreezeError, match="hold no parameters"):
        freeze_vision.freeze_vision_tower([model])


def test_nothing_left_to_train_fails_loudly():
    model = torch.nn.Module()
    model.visual = torch.nn.Linear(2, 2)
    with pytest.raises(freeze_vision.VisionFreezeError, match="no trainable parameter"):
        freeze_vision.freeze_vision_tower([model])


@pytest.mark.parametrize(
    "external_lib, expected",
    [
        ("verl_recipes.runtime.freeze_vision", True),
        (["verl_recipes.rewards.other", "verl_recipes.runtime.freeze_vision"], True),
        (OmegaConf.create(["verl_recipes.runtime.freeze_vision"]), True),
        ("scripts.freeze", False),
        (["scripts.freeze_vision_extra"], False),
        (None, False),
    ],
)
def test_names_this_module(external_lib, expected):
    assert freeze_vision.names_this_module(external_lib) is expected


def test_import_wraps_the_verl_symbols():
    originals = freeze_vision._ORIGINALS
    assert originals[(FSDPEngine, "_build_module")].__qualname__ == "FSDPEngine._build_module"
    assert FSDPEngine._build_module.__name__ == "build_module_with_frozen_vision"
    assert isinstance(EngineRegistry.__dict__["new"], classmethod)
    assert EngineRegistry.new.__func__.__name__ == "new_engine_with_backend_check"
    freeze_vision.install()  # idempotent: a second import path must not wrap twice
    assert FSDPEngine._build_module.__name__ == "build_module_with_frozen_vision"
    assert originals[(FSDPEngine, "_build_module")].__qualname__ == "FSDPEngine._build_module"


def fake_engine(
    external_lib="verl_recipes.runtime.freeze_vision",
    forward_only=False,
    strategy="fsdp2",
    use_orig_params=False,
    model_type="qwen2_5_vl",
):
    return SimpleNamespace(
        model_config=SimpleNamespace(external_lib=external_lib, hf_config=SimpleNamespace(model_type=model_type)),
        engine_config=SimpleNamespace(forward_only=forward_only, strategy=strategy, use_orig_params=use_orig_params),
    )


@pytest.mark.parametrize(
    "engine_kwargs, frozen",
    [
        ({}, True),
        ({"strategy": "fsdp", "use_orig_params": True}, True),
        ({"external_lib": None}, False),  # a critic or any engine that did not ask for the freeze
        ({"external_lib": "verl_recipes.rewards.other"}, False),
        ({"forward_only": True}, False),  # the reference model builds no optimizer
    ],
)
def test_wrapped_fsdp_builder_freezes_only_opted_in_training_engines(engine_kwargs, frozen):
    model = tiny_model("qwen2_5_vl")
    build_module = freeze_vision._wrap_fsdp_build_module(lambda engine: model)

    assert build_module(fake_engine(**engine_kwargs)) is model

    vision = [p.requires_grad for n, p in model.named_parameters() if is_vision(n)]
    assert vision and all(flag is not frozen for flag in vision)


@pytest.mark.parametrize(
    "engine_kwargs, error",
    [
        ({"strategy": "fsdp", "use_orig_params": False}, "use_orig_params=True"),
        ({"model_type": "llava"}, "supports model types"),  # projector outside the tower
        ({"model_type": "qwen2"}, "supports model types"),  # text-only
    ],
)
def test_wrapped_fsdp_builder_refuses_before_building(engine_kwargs, error):
    built = []
    build_module = freeze_vision._wrap_fsdp_build_module(lambda engine: built.append(engine))
    with pytest.raises(freeze_vision.VisionFreezeError, match=error):
        build_module(fake_engine(**engine_kwargs))
    assert built == []


@pytest.mark.parametrize("backend", ["veomni", "torchtitan", "automodel", "fsdp_turbo"])
def test_registry_refuses_backends_the_hook_does_not_reach(backend):
    engine = fake_engine()
    with pytest.raises(freeze_vision.VisionFreezeError, match="backends"):
        EngineRegistry.new(
            model_type="language_model", backend=backend, model_config=engine.model_config,
            engine_config=engine.engine_config,
        )


@pytest.mark.parametrize("engine_kwargs", [{"external_lib": None}, {"forward_only": True}])
def test_registry_passes_other_engines_to_verl(engine_kwargs):
    engine = fake_engine(**engine_kwargs)
    with pytest.raises(AssertionError, match="Unknown backend"):  # verl's own lookup, reached unchanged
        EngineRegistry.new(
            model_type="language_model", backend="no_such_backend", model_config=engine.model_config,
            engine_config=engine.engine_config,
        )


class MegatronVisionChunk(torch.nn.Module):
    """Shaped like Megatron-Bridge's Qwen-VL chunks: a tower under `tower_name` plus `language_model`. Its Qwen3-VL
    model keeps the merger and the deepstack mergers inside `vision_model`, as the HF Qwen3-VL tower does."""

    def __init__(self, tower_name, family="qwen2_5_vl"):
        super().__init__()
        if tower_name:
            setattr(self, tower_name, tiny_model(family).model.visual)
        self.language_model = torch.nn.Linear(4, 4)


class Float16Wrapper(torch.nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module


@pytest.mark.parametrize(
    "make_chunks, first_stage, frozen_tensors",
    [  # built in the test, not at collection
        (lambda: [MegatronVisionChunk("visual")], True, 30),  # Qwen2.5-VL: HF tower inside the Megatron model
        (lambda: [Float16Wrapper(MegatronVisionChunk("vision_model"))], True, 30),  # Qwen3-VL naming, wrapped
        (lambda: [Float16Wrapper(MegatronVisionChunk("vision_model", "qwen3_vl"))], True, 39),  # + deepstack mergers
        (lambda: [MegatronVisionChunk(None), MegatronVisionChunk("visual")], True, 30),  # virtual pipeline chunks
        (lambda: [MegatronVisionChunk(None)], False, 0),  # later pipeline stages hold no tower
    ],
)
def test_megatron_pre_wrap_hook(make_chunks, first_stage, frozen_tensors):
    chunks = make_chunks()
    hook = freeze_vision.megatron_pre_wrap_hook(lambda: first_stage)

    assert hook(chunks) is chunks

    frozen = [p for chunk in chunks for p in chunk.parameters() if not p.requires_grad]
    assert len(frozen) == frozen_tensors
    assert all(p.requires_grad for chunk in chunks for n, p in chunk.named_parameters() if "language_model" in n)


def test_megatron_pre_wrap_hook_fails_on_first_stage_without_tower():
    hook = freeze_vision.megatron_pre_wrap_hook(lambda: True)
    with pytest.raises(freeze_vision.VisionFreezeError, match="has no vision tower"):
        hook([MegatronVisionChunk(None)])


class FakeBridgeProvider:
    """Megatron-Bridge contract: pre-wrap hooks run on the model chunks before DDP wrapping."""

    def __init__(self):
        self.hooks = []
        self.requires_grad_at_wrap = None

    def register_pre_wrap_hook(self, hook):
        self.hooks.append(hook)

    def provide_distributed_model(self):
        chunks = [MegatronVisionChunk("visual")]
        for hook in self.hooks:
            chunks = hook(chunks)
        self.requires_grad_at_wrap = {n: p.requires_grad for n, p in chunks[0].named_parameters()}
        return chunks


@pytest.mark.parametrize("engine_kwargs, frozen", [({}, True), ({"external_lib": None}, False)])
def test_wrapped_megatron_builder_freezes_before_ddp(monkeypatch, engine_kwargs, frozen):
    monkeypatch.setattr(freeze_vision, "_first_pipeline_stage", lambda: True)
    engine = fake_engine(**engine_kwargs)
    engine.provider = FakeBridgeProvider()
    build = freeze_vision._wrap_megatron_build_module(lambda self: self.provider.provide_distributed_model())

    build(engine)

    at_wrap = engine.provider.requires_grad_at_wrap
    assert all(at_wrap[n] is not frozen for n in at_wrap if n.startswith("visual."))
    assert all(at_wrap[n] for n in at_wrap if n.startswith("language_model."))


def test_pinned_verl_megatron_engine_builds_through_the_bridge_provider():
    """megatron-core is not installed here, so install() cannot reach MegatronEngine; check the pinned source: the
    wrapped method exists and hands self.provider (where the pre-wrap hook is registered) to make_megatron_module."""
    source = Path(verl.__file__).parent / "workers" / "engine" / "megatron" / "transformer_impl.py"
    tree = ast.parse(source.read_text())
    engine = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "MegatronEngine")
    method = next(node for node in engine.body if getattr(node, "name", None) == "_build_megatron_module")
    calls = [
        node for node in ast.walk(method)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "make_megatron_module"
    ]
    assert [ast.unparse(kw.value) for call in calls for kw in call.keywords if kw.arg == "provider"] == ["self.provider"]


def test_wrapped_megatron_builder_needs_the_bridge_provider():
    engine = fake_engine()
    engine.provider = None  # vanilla_mbridge=True builds no provider
    build = freeze_vision._wrap_megatron_build_module(lambda self: pytest.fail("must not build"))
    with pytest.raises(freeze_vision.VisionFreezeError, match="vanilla_mbridge"):
        build(engine)


@pytest.mark.representative
@pytest.mark.parametrize("name, override, named", [
    ("qwen3-vl-30b-a3b-geo3k-dapo", "actor_rollout_ref.actor.megatron.vanilla_mbridge=true",
     "'actor_rollout_ref.actor.megatron.vanilla_mbridge' = true"),  # the Megatron path: no provider, no hook
    ("qwen3-vl-8b-geo3k-dapo", "actor_rollout_ref.actor.strategy=fsdp", "'actor_rollout_ref.actor.strategy' = fsdp"),
])
def test_make_check_refuses_before_start_up_what_the_hook_refuses_at_engine_build(name, override, named):
    """verl_recipes.check.model.vision_freeze on the composed recipe, one key broken: the error names it."""
    [error] = vision_freeze(compose(catalog.get(name), [override], naming=False))
    assert error.startswith(named), error


@pytest.mark.representative
@pytest.mark.parametrize("value", ["true", "null"])
def test_make_check_refuses_a_megatron_vl_recipe_whose_bridge_freezes_the_language_model(value):
    """Megatron-Bridge 0.5.1's Qwen3-VL-MoE provider freezes the language model unless told not to; with the frozen
    tower nothing is left to train (the tiny smoke on 4 x H100 stopped there). The recipe says false; make check
    refuses a config that does not."""
    key = "actor_rollout_ref.actor.megatron.override_transformer_config.freeze_language_model"
    recipe = catalog.get("qwen3-vl-30b-a3b-geo3k-dapo")
    assert megatron_language_model(compose(recipe)) == []
    [error] = megatron_language_model(compose(recipe, [f"{key}={value}"], naming=False))
    assert error.startswith(f"'{key}' is not false") and "configs/megatron/vl_language_model" in error
    assert megatron_language_model(compose(catalog.get("qwen3-30b-a3b-grpo"))) == []  # a text model: nothing to say


def test_other_verl_version_is_refused(monkeypatch):
    monkeypatch.setattr(freeze_vision.verl, "__version__", "0.9.2")
    with pytest.raises(ImportError, match=r"verified against verl 0\.9\.1, found verl 0\.9\.2"):
        freeze_vision.install()


def test_missing_verl_symbol_is_refused():
    with pytest.raises(ImportError, match="does not define"):
        freeze_vision._patch(FSDPEngine, "_build_module_renamed_in_a_later_verl", freeze_vision._wrap_fsdp_build_module)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


@pytest.mark.slow
def test_real_verl_fsdp2_engine_step_on_cpu(tmp_path):
    """The GPU check's own code path on CPU: verl imports the hook via external_lib, builds its FSDP2 engine,
    runs train_batch with ppo_loss on an image batch; the tower stays bit-identical, the LM moves, and FSDP1
    without use_orig_params is refused."""
    env = {**os.environ, "OUT": str(tmp_path), "MASTER_PORT": free_port(), "PYTHONPATH": str(REPO_ROOT)}
    run = subprocess.run(
        [sys.executable, str(CHECK_SCRIPT), "--cpu-dry-run", "--steps", "2"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    summary = json.loads((tmp_path / "freeze_vision.json").read_text())
    frozen, baseline, refusal = summary["results"]
    assert summary["passed"]
    assert frozen["hook_imported_by_verl_external_lib"] is True
    assert frozen["vision_unchanged"] == frozen["vision_tensors"] == 30
    assert frozen["language_changed"] == frozen["language_tensors"]
    assert frozen["vision_in_optimizer_state"] == 0
    assert baseline["vision_unchanged"] == 0
    assert "VisionFreezeError" in refusal["error"]

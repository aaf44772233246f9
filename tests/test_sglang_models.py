"""SGLang's Qwen2.5-VL vision tower on verl's transformers (verl_recipes/runtime/sglang_models/qwen2_5_vl.py).

This machine has no SGLang, so SGLang's model module is a stand-in holding what the shim reads of it: the rotary class
it imported from transformers and its EntryClass. The rotary class itself is the installed transformers' (verl 0.9.1's
5.9.0), whose own forward is the trainer's side of the check."""

import importlib
import pkgutil
import sys
import types
from pathlib import Path

import pytest
import torch
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionRotaryEmbedding

from verl_recipes import catalog
from verl_recipes.compose import compose

PACKAGE = "verl_recipes.runtime.sglang_models"
SHIM = PACKAGE + ".qwen2_5_vl"
SGLANG = "sglang.srt.models.qwen2_5_vl"
ARCH = "Qwen2_5_VLForConditionalGeneration"  # the architecture SGLang's registry looks the class up by


class SeqlenRotary(torch.nn.Module):
    """A transformers whose rotary embedding still takes seqlen (5.6.0's signature)."""

    def forward(self, seqlen):
        raise AssertionError("not called")


@pytest.fixture
def shim(monkeypatch):
    """Import the shim over a stand-in SGLang module; returns (shim, stand-in) for a given rotary class."""

    def load(rotary):
        sglang = types.ModuleType(SGLANG)
        sglang.Qwen2_5_VisionRotaryEmbedding = rotary
        sglang.EntryClass = [type(ARCH, (torch.nn.Module,), {})]
        for name in ("sglang", "sglang.srt", "sglang.srt.models"):
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        monkeypatch.setitem(sys.modules, SGLANG, sglang)
        monkeypatch.delitem(sys.modules, SHIM, raising=False)
        sys.modules["sglang.srt.models"].qwen2_5_vl = sglang
        return importlib.import_module(SHIM), sglang

    return load


def test_verls_transformers_takes_position_ids_where_sglang_passes_a_length(shim):
    """The failure of the tiny VL smoke on SGLang (1 x H200, 2026-12-01). When transformers' signature is back to
    seqlen, or SGLang calls it with positions, this fails and the shim can go."""
    module, _ = shim(Qwen2_5_VisionRotaryEmbedding)
    assert module.takes_position_ids(Qwen2_5_VisionRotaryEmbedding)


def test_sglangs_table_lookup_gives_the_frequencies_the_trainer_computes(shim):
    """SGLang asks for the table of max_grid_size positions (a CUDA scalar there) and indexes it with each patch's
    (h, w) positions; verl's actor (transformers 5.9.0) computes the frequencies of those positions directly."""
    module, sglang = shim(Qwen2_5_VisionRotaryEmbedding)
    rotary = sglang.Qwen2_5_VisionRotaryEmbedding(40)  # head_dim // 2 of a 80-wide vision head
    assert isinstance(rotary, module.SeqlenVisionRotaryEmbedding)
    trainer = Qwen2_5_VisionRotaryEmbedding(40)
    grid_thw = torch.tensor([[1, 6, 10], [1, 14, 4]])
    positions = torch.cat([torch.stack(torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij"), -1).reshape(-1, 2)
                           for _, h, w in grid_thw.tolist()])
    table = rotary(grid_thw[:, 1:].max())
    assert table.shape == (14, 20)
    assert torch.equal(table[positions].flatten(1), trainer(positions).flatten(1))


def test_a_transformers_that_still_takes_seqlen_is_left_alone(shim):
    _, sglang = shim(SeqlenRotary)
    assert sglang.Qwen2_5_VisionRotaryEmbedding is SeqlenRotary


def test_sglangs_registry_finds_the_class_under_its_architecture(shim):
    """SGLang imports each module of the package and keys its EntryClass by class name (srt/models/registry.py)."""
    module, sglang = shim(Qwen2_5_VisionRotaryEmbedding)
    package = importlib.import_module(PACKAGE)
    assert [m.name for m in pkgutil.iter_modules(package.__path__, PACKAGE + ".")] == [SHIM]
    assert [cls.__name__ for cls in module.EntryClass] == [ARCH]


@pytest.mark.parametrize("recipe", ["qwen25-vl-7b-geo3k-dapo", "qwen25-7b-grpo"])
def test_an_sglang_run_names_the_package_to_sglangs_scheduler(recipe):
    cfg = compose(catalog.parse(recipe), ["configs/rollout=sglang"], naming=False)
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.SGLANG_EXTERNAL_MODEL_PACKAGE == PACKAGE


def gpu_check():
    """tests/gpu/sglang_vl_check.py, the GPU check of the shim on SGLang's own engine."""
    path = Path(__file__).parent / "gpu" / "sglang_vl_check.py"
    spec = importlib.util.spec_from_file_location("sglang_vl_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("control", "patched", "passes"), [
    ({"rc": 1, "rotary_failure": True}, {"rc": 0, "tokens": 8}, True),
    ({"rc": 0, "rotary_failure": False}, {"rc": 0, "tokens": 8}, False),  # no failure to fix: proves nothing
    ({"rc": 1, "rotary_failure": False}, {"rc": 0, "tokens": 8}, False),  # failed, but not as the smoke did
    ({"rc": 1, "rotary_failure": True}, {"rc": None, "tokens": 0}, False),  # the patched engine hung
])
def test_the_gpu_check_passes_only_on_the_smokes_failure_then_an_answer(control, patched, passes):
    assert (not gpu_check().verdict(control, patched)) is passes

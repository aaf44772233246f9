"""Weight gates: the last step's saved weights against the initial model (verl_recipes/check/weights.py), and the smoke
arguments that make verl save them."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from verl_recipes import catalog
from verl_recipes.check import weights
from verl_recipes.smoke.run import overlay_args, smoke_args

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def initial(tmp_path):
    """A bf16 'model' in the hub layout of Qwen2.5-VL (language model under model., tower under visual.)."""
    torch.manual_seed(0)
    tensors = {"model.embed_tokens.weight": torch.randn(16, 8), "model.layers.0.mlp.up_proj.weight": torch.randn(8, 8),
               "visual.blocks.0.attn.qkv.weight": torch.randn(24, 8), "visual.merger.mlp.0.weight": torch.randn(8, 8),
               "lm_head.weight": torch.randn(16, 8)}
    folder = tmp_path / "initial"
    folder.mkdir()
    save_file({k: v.to(torch.bfloat16) for k, v in tensors.items()}, folder / "model.safetensors")
    return folder


def saved(tmp_path, initial, change: dict[str, float]) -> Path:
    """What verl saves at the last step: fp32 master weights, transformers 5 names, some tensors moved."""
    from safetensors.torch import load_file

    out = {}
    for key, value in load_file(initial / "model.safetensors").items():
        name = key.replace("model.", "model.language_model.", 1) if key.startswith("model.") else key
        name = "model." + name if name.startswith("visual.") else name
        out[name] = value.float() + change.get(key, 0.0)
    folder = tmp_path / "final"
    folder.mkdir(exist_ok=True)
    save_file(out, folder / "model-00001-of-00001.safetensors")
    return folder


def test_an_update_below_bf16_precision_counts_as_a_change(tmp_path, initial):
    final = saved(tmp_path, initial, {"model.layers.0.mlp.up_proj.weight": 2e-6})  # one lr-1e-6 Adam step
    failures, counts = weights.compare(initial, final, ["visual"])
    assert failures == []
    assert counts["compared"] == 5 and counts["changed"] == 1 and counts["frozen_exact"] == 2
    assert counts["largest_change"]["tensor"] == "layers.0.mlp.up_proj.weight"


def test_weights_that_did_not_move_fail(tmp_path, initial):
    failures, _ = weights.compare(initial, saved(tmp_path, initial, {}), ["visual"])
    assert failures == ["weights: none of the 3 trainable tensors changed: the update did not move the model"]


def test_a_moved_frozen_tensor_is_named(tmp_path, initial):
    final = saved(tmp_path, initial, {"model.layers.0.mlp.up_proj.weight": 1e-3, "visual.merger.mlp.0.weight": 1e-6})
    failures, _ = weights.compare(initial, final, ["visual"])
    assert len(failures) == 1 and "frozen tensor 'visual.merger.mlp.0.weight' changed" in failures[0]


def test_a_frozen_module_the_model_lacks_is_reported(tmp_path, initial):
    final = saved(tmp_path, initial, {"model.layers.0.mlp.up_proj.weight": 1e-3})
    failures, _ = weights.compare(initial, final, ["vision_model"])
    assert failures == ["weights: no tensor under ['vision_model'] in " + str(initial) +
                        "; does checks.yaml name the frozen module?"]


def test_a_run_that_saved_nothing_names_the_folder_and_the_keys(tmp_path, initial):
    failures, _ = weights.compare(initial, tmp_path / "absent", ["visual"])
    assert "saved no last step at" in failures[0] and "checkpoint.save_contents" in failures[0]


def test_last_step_folder_follows_verls_layout(tmp_path):
    assert weights.last_step_folder(tmp_path, "checkpoints/p/e", 2, "dp") == tmp_path / "checkpoints/p/e/global_step_2/actor/huggingface"
    assert weights.last_step_folder(tmp_path, "/abs/ckpt", 3, "dp") == Path("/abs/ckpt/global_step_3/actor/huggingface")


def test_a_megatron_checkpoint_keeps_its_hf_folder_where_verl_writes_it(tmp_path):
    """verl's own folder names (megatron_utils imports Megatron, absent here, so its source is read): this fails if a
    verl upgrade moves the folder."""
    import importlib.util

    source = (Path(importlib.util.find_spec("verl").origin).parent / "utils" / "megatron_utils.py").read_text()
    assert '_MODEL_SUBDIR = "model"' in source and '_HUGGINGFACE_SUBDIR = "huggingface"' in source
    assert weights.last_step_folder(tmp_path, "checkpoints", 2, "megatron") == \
        tmp_path / "checkpoints/global_step_2/actor/model/huggingface"


def test_tiny_smokes_save_the_last_step_and_take_the_cards_tiny_args(tmp_path):
    args = smoke_args(catalog.get("deepeyes-qwen25-vl-7b"), tmp_path)
    assert args[:2] == ["+configs/smoke=tiny_gpu", f"actor_rollout_ref.model.path={tmp_path.resolve() / 'model'}"]
    assert "data.max_prompt_length=512" in args and args[-2:] == weights.SAVE_LAST_STEP


@pytest.mark.parametrize("name, saves", [("qwen25-vl-7b-geo3k-dapo", True), ("deepeyes-qwen25-vl-7b", True),
                                         ("qwen25-7b-grpo", False), ("qwen3-30b-a3b-grpo", False),
                                         ("qwen3-vl-30b-a3b-geo3k-dapo", True)])
def test_node_smokes_save_weights_only_where_something_is_frozen(name, saves):
    recipe = catalog.get(name)
    args = overlay_args(recipe, False, recipe.card_value("smoke_model"))
    assert (args[-2:] == weights.SAVE_LAST_STEP) is saves


@pytest.mark.parametrize("name", ["qwen25-vl-7b-geo3k-dapo", "qwen3-vl-8b-geo3k-dapo", "deepeyes-qwen25-vl-7b"])
def test_recorded_vl_smokes_kept_the_tower_and_moved_the_language_model(name):
    report = json.loads((REPO / f"results/smoke/{name}-v1.tiny-h200.json").read_text())
    assert report["failures"] == [] and report["weights"]["frozen_exact"] >= 30
    assert report["weights"]["changed"] == report["weights"]["compared"] - report["weights"]["frozen_exact"]

"""Checkpoint names for an SGLang rollout (verl_recipes/runtime/checkpoint_names.py, configs/rollout/sglang): verl's
own weight export (verl.utils.model.convert_weight_keys, as the FSDP engine calls it) on the tiny models of every
family, built on the meta device. Qwen2.5-VL's weights leave under its checkpoint's names, which SGLang 0.5.12's
loader knows; the families whose checkpoints carry the model's names keep them. That verl loads the hook only when
the variable is set: tests/test_faults.py, beside the others."""

import copy
import types

import pytest

from verl_recipes import catalog, random_models
from verl_recipes.compose import compose
from verl_recipes.runtime import checkpoint_names

verl_model = pytest.importorskip("verl.utils.model")


def tiny(family: str, device: str):
    """`family`'s tiny model with a 256-token vocabulary, in fp32 on `device`."""
    import torch

    config = copy.deepcopy(random_models.TINY[family])
    config.get("text_config", config)["vocab_size"] = 256
    return random_models._model(random_models._config(config), device, torch.float32)


def exported(family: str) -> tuple[list[str], list[str]]:
    """The state dict's names of `family`'s tiny model, as verl exports them unpatched and patched."""
    model = tiny(family, "meta")
    names = list(model.state_dict())
    unpatched = list(verl_model.convert_weight_keys(dict.fromkeys(names), model))
    patched = list(checkpoint_names.with_checkpoint_names(verl_model.convert_weight_keys)(dict.fromkeys(names), model))
    return unpatched, patched


def test_qwen25_vl_leaves_under_its_checkpoint_names():
    unpatched, patched = exported("qwen2_5_vl")
    # what broke the SGLang smoke: transformers 5 left verl's rename without its table
    assert "model.visual.blocks.0.mlp.gate_proj.weight" in unpatched
    assert "model.language_model.norm.weight" in unpatched
    # what SGLang's Qwen2_5_VLForConditionalGeneration.load_weights knows: visual.*, model.*, lm_head.*
    assert len(patched) == len(unpatched)
    assert "visual.blocks.0.mlp.gate_proj.weight" in patched and "visual.merger.mlp.0.weight" in patched
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= set(patched)
    assert "model.layers.3.self_attn.q_proj.weight" in patched
    assert not [n for n in patched if n.startswith(("model.visual", "model.language_model"))]
    assert {n.split(".")[0] for n in patched} == {"visual", "model", "lm_head"}


def test_a_model_sharded_by_fsdp2_is_renamed_by_its_transformers_class():
    """verl's FSDP engine hands convert_weight_keys the FSDP2 module, whose class fully_shard swapped for
    FSDPQwen2_5_VLForConditionalGeneration: looked up by that name, nothing would be renamed."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    model = tiny("qwen2_5_vl", "cpu")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        fully_shard(model)
        assert type(model).__name__ == "FSDPQwen2_5_VLForConditionalGeneration"
        names = list(checkpoint_names.with_checkpoint_names(verl_model.convert_weight_keys)(model.state_dict(), model))
    finally:
        dist.destroy_process_group()
    assert "visual.blocks.0.mlp.gate_proj.weight" in names and "model.norm.weight" in names
    assert not [n for n in names if n.startswith(("model.visual", "model.language_model"))]


@pytest.mark.parametrize("family", ["qwen2", "qwen3_moe", "qwen3_vl", "qwen3_vl_moe"])
def test_models_whose_checkpoints_carry_their_names_keep_them(family):
    unpatched, patched = exported(family)
    assert patched == unpatched


def test_only_pure_renamings_are_taken():
    """Qwen3-MoE's registered transforms fuse the experts: taking their renamings alone would name tensors that the
    export does not produce."""
    moe = types.SimpleNamespace(config=types.SimpleNamespace(model_type="qwen3_moe"))
    assert checkpoint_names.registered_renamings(moe) == {}
    vl = type("Qwen2_5_VLForConditionalGeneration", (), {"config": types.SimpleNamespace(model_type="qwen2_5_vl")})()
    assert checkpoint_names.registered_renamings(vl) == {"^visual": "model.visual",
                                                        r"^model(?!\.(language_model|visual))": "model.language_model"}


def test_a_models_own_table_is_kept_and_the_patch_wraps_once():
    seen = []
    model = types.SimpleNamespace(_checkpoint_conversion_mapping={"^a": "b"})
    convert = checkpoint_names.with_checkpoint_names(lambda state, m: seen.append(m._checkpoint_conversion_mapping))
    convert({}, model)
    assert seen == [{"^a": "b"}]
    module = types.SimpleNamespace(convert_weight_keys=convert)
    checkpoint_names.patch(module)
    assert module.convert_weight_keys is convert


def test_the_sglang_fragment_asks_for_checkpoint_names():
    recipe = catalog.parse("qwen25-vl-7b-geo3k-dapo/v1")
    cfg = compose(recipe, ["configs/rollout=sglang"])
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars[checkpoint_names.NAMES_ENV] == "1"
    vllm = compose(recipe)
    assert checkpoint_names.NAMES_ENV not in vllm.ray_kwargs.ray_init.runtime_env.get("env_vars", {})

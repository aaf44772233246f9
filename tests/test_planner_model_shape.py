"""model_shape: reading config.json, and parameter counts checked against the real HF modules."""

import json

import pytest
import torch
import transformers
from test_planner_hf_configs import (
    LLAMA_3_2_1B,
    QWEN1_5_MOE_A2_7B,
    QWEN2_5_1_5B,
    QWEN2_5_7B,
    QWEN2_5_VL_7B,
    QWEN3_8B,
    QWEN3_30B_A3B,
    QWEN3_VL_8B,
    QWEN3_VL_30B_A3B,
)

from verl_recipes.catalog import REPO
from verl_recipes.planner.model_shape import hf_total_params, model_shape


def meta_model_params(hf_config: dict) -> tuple[int, int]:
    """(all, vision) parameters of the HF model built on the meta device: no weights, no memory."""
    config = transformers.AutoConfig.for_model(**hf_config)
    is_vl = "vision_config" in hf_config
    auto = transformers.AutoModelForImageTextToText if is_vl else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config)
    params = dict(model.named_parameters())
    vision = sum(p.numel() for name, p in params.items() if ".visual." in name)
    return sum(p.numel() for p in params.values()), vision


@pytest.mark.parametrize(
    "hf_config",
    [QWEN2_5_7B, QWEN2_5_1_5B, QWEN3_8B, QWEN3_30B_A3B, QWEN1_5_MOE_A2_7B, LLAMA_3_2_1B, QWEN2_5_VL_7B, QWEN3_VL_8B,
     QWEN3_VL_30B_A3B],
    ids=["qwen2.5-7b", "qwen2.5-1.5b", "qwen3-8b", "qwen3-30b-a3b", "qwen1.5-moe", "llama3.2-1b", "qwen2.5-vl",
         "qwen3-vl", "qwen3-vl-30b-a3b"],
)
def test_parameter_count_matches_the_hf_model(hf_config):
    total, vision = meta_model_params(hf_config)
    shape = model_shape(hf_config)
    assert hf_total_params(shape) == total
    assert shape.vision_params == vision


@pytest.mark.parametrize(
    "hf_config, expected",
    [
        (QWEN2_5_7B, dict(hidden_size=3584, num_kv_heads=4, head_dim=128, qkv_bias=True, qk_layernorm=False)),
        (QWEN2_5_1_5B, dict(tie_word_embeddings=True, head_dim=128, vocab_size=151936)),
        (QWEN3_8B, dict(head_dim=128, qkv_bias=False, qk_layernorm=True, num_layers=36)),
        (QWEN3_30B_A3B, dict(num_experts=128, num_experts_per_tok=8, moe_ffn_hidden_size=768, is_moe=True)),
        (QWEN1_5_MOE_A2_7B, dict(shared_expert_ffn_hidden_size=5632, qkv_bias=True)),
        (LLAMA_3_2_1B, dict(head_dim=64, qkv_bias=False, tie_word_embeddings=True, is_moe=False)),
        (QWEN3_VL_8B, dict(hidden_size=4096, num_layers=36, vocab_size=151936, qk_layernorm=True)),
        (QWEN3_VL_30B_A3B, dict(num_experts=128, num_experts_per_tok=8, moe_ffn_hidden_size=768, qk_layernorm=True)),
    ],
)
def test_shape_fields(hf_config, expected):
    shape = model_shape(hf_config)
    assert {key: getattr(shape, key) for key in expected} == expected


def test_committed_qwen3_vl_30b_a3b_config_is_the_public_model():
    """models/ holds a config written from the public card (no hub here): it must be the shape counted above."""
    committed = model_shape(REPO / "models/Qwen/Qwen3-VL-30B-A3B-Instruct")
    assert committed == model_shape(QWEN3_VL_30B_A3B)
    assert hf_total_params(committed) == pytest.approx(31.07e9, rel=1e-3)  # the model card's 31.07 B


def test_loads_a_config_file_or_its_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN2_5_7B))
    assert model_shape(tmp_path) == model_shape(str(tmp_path / "config.json")) == model_shape(QWEN2_5_7B)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        model_shape(tmp_path / "nowhere")


def test_missing_field_names_the_key():
    broken = {key: value for key, value in QWEN2_5_7B.items() if key != "intermediate_size"}
    with pytest.raises(ValueError, match="intermediate_size"):
        model_shape(broken)


def test_mixed_dense_and_moe_layers_are_refused():
    with pytest.raises(ValueError, match="mlp_only_layers"):
        model_shape({**QWEN3_30B_A3B, "mlp_only_layers": [0, 1]})


def test_unknown_vision_tower_is_refused():
    with pytest.raises(ValueError, match="vision_tower_params"):
        model_shape({**QWEN2_5_VL_7B, "model_type": "llava"})

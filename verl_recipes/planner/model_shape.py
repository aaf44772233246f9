"""Model shape from a Hugging Face config.json, and parameter counts built from it.

Supported: qwen2, qwen3, qwen2_moe, qwen3_moe, llama-like dense models, and the VL models
qwen2_5_vl / qwen3_vl / qwen3_vl_moe (text part from `text_config` when present, vision tower counted apart).
"""

import json
from dataclasses import dataclass
from pathlib import Path

# Model types whose q/k/v projections always carry a bias (Qwen2 family has no config key for it).
QKV_BIAS_MODEL_TYPES = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"}
# Model types with per-head RMSNorm on q and k (Megatron: qk_layernorm).
QK_NORM_MODEL_TYPES = {"qwen3", "qwen3_moe", "qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe"}


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    hidden_size: int
    ffn_hidden_size: int  # dense MLP intermediate size
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    qkv_bias: bool
    qk_layernorm: bool
    tie_word_embeddings: bool
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_ffn_hidden_size: int = 0
    shared_expert_ffn_hidden_size: int = 0
    vision_params: int = 0  # whole vision tower (ViT + merger), 0 for text-only models

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def load_hf_config(hf_config: dict | str | Path) -> dict:
    """A config.json as a dict: pass the dict itself, the file, or the model directory holding it."""
    if isinstance(hf_config, dict):
        return hf_config
    path = Path(hf_config)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"HF config not found: {path} (pass a config.json file, its directory, or a dict)")
    return json.loads(path.read_text())


def model_shape(hf_config: dict | str | Path) -> ModelShape:
    """Read the fields the planner needs; a missing required field raises naming the key."""
    config = load_hf_config(hf_config)
    # VL configs keep the LLM fields in text_config (transformers >= 4.5x); older ones keep them top-level.
    text = {**config, **config.get("text_config", {})}
    model_type = config.get("model_type", text.get("model_type", ""))

    def required(key: str) -> int:
        if key not in text:
            raise ValueError(f"HF config (model_type={model_type!r}) lacks {key!r}; is this a decoder LLM config?")
        return text[key]

    if text.get("mlp_only_layers") or text.get("decoder_sparse_step", 1) != 1:
        raise ValueError(
            "HF config mixes dense and MoE layers (mlp_only_layers / decoder_sparse_step); "
            "the planner models all-MoE stacks only"
        )
    hidden = required("hidden_size")
    heads = required("num_attention_heads")
    return ModelShape(
        model_type=model_type,
        hidden_size=hidden,
        ffn_hidden_size=required("intermediate_size"),
        num_layers=required("num_hidden_layers"),
        num_attention_heads=heads,
        num_kv_heads=text.get("num_key_value_heads") or heads,
        head_dim=text.get("head_dim") or hidden // heads,
        vocab_size=required("vocab_size"),
        qkv_bias=model_type in QKV_BIAS_MODEL_TYPES or bool(text.get("attention_bias", False)),
        qk_layernorm=model_type in QK_NORM_MODEL_TYPES,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        num_experts=text.get("num_experts") or text.get("num_local_experts") or 0,
        num_experts_per_tok=text.get("num_experts_per_tok") or 0,
        moe_ffn_hidden_size=text.get("moe_intermediate_size") or 0,
        shared_expert_ffn_hidden_size=text.get("shared_expert_intermediate_size") or 0,
        vision_params=vision_tower_params(model_type, config["vision_config"]) if "vision_config" in config else 0,
    )


# ---- parameter counts (weights only; `tp`, `ep`, `etp` give one rank's shard) ----


def qkv_params(shape: ModelShape, tp: int = 1) -> float:
    """linear_qkv weight (+ bias): ((n_h + 2·n_kv)·d / TP)·h."""
    out = (shape.num_attention_heads + 2 * shape.num_kv_heads) * shape.head_dim / tp
    return out * shape.hidden_size + (out if shape.qkv_bias else 0)


def attention_params(shape: ModelShape, tp: int = 1) -> float:
    """q/k/v + output projection + q/k norms (Megatron's count, as in mbridge's memory_estimator)."""
    proj = shape.hidden_size * shape.num_attention_heads * shape.head_dim / tp
    qk_norms = 2 * shape.head_dim if shape.qk_layernorm else 0
    return qkv_params(shape, tp) + proj + qk_norms


def gated_mlp_params(hidden: int, ffn: int, tp: int = 1) -> float:
    """SwiGLU MLP: fc1 = (2F/TP)·h, fc2 = h·(F/TP)."""
    return 3 * hidden * ffn / tp


def routed_expert_params(shape: ModelShape, ep: int = 1, etp: int = 1) -> float:
    """Routed experts on one rank: (E/EP) experts, each a gated MLP split over ETP."""
    return shape.num_experts / ep * gated_mlp_params(shape.hidden_size, shape.moe_ffn_hidden_size, etp)


def mlp_block_params(shape: ModelShape, tp: int = 1, ep: int = 1, etp: int = 1) -> float:
    """The MLP block of one layer: dense MLP, or routed + shared experts (router not counted)."""
    if not shape.is_moe:
        return gated_mlp_params(shape.hidden_size, shape.ffn_hidden_size, tp)
    shared = gated_mlp_params(shape.hidden_size, shape.shared_expert_ffn_hidden_size, tp)
    return routed_expert_params(shape, ep, etp) + shared


def embedding_params(shape: ModelShape, tp: int = 1) -> float:
    """Vocabulary-parallel embedding (or output layer): (V/TP)·h."""
    return shape.vocab_size / tp * shape.hidden_size


def hf_total_params(shape: ModelShape) -> int:
    """All parameters as the HF model holds them: norms, router and shared-expert gate included."""
    h = shape.hidden_size
    per_layer = attention_params(shape) + mlp_block_params(shape) + 2 * h  # input + post-attention RMSNorm
    if shape.is_moe:
        per_layer += shape.num_experts * h  # router
        per_layer += h if shape.shared_expert_ffn_hidden_size else 0  # shared_expert_gate (qwen2_moe)
    output_layer = 0 if shape.tie_word_embeddings else embedding_params(shape)
    return int(shape.num_layers * per_layer + embedding_params(shape) + output_layer + h + shape.vision_params)


def vision_tower_params(model_type: str, vision: dict) -> int:
    """Parameters of the Qwen2.5-VL / Qwen3-VL vision tower (patch embed, blocks, mergers), as HF builds it."""
    h, ffn, depth = vision["hidden_size"], vision["intermediate_size"], vision["depth"]
    merged = h * vision["spatial_merge_size"] ** 2  # merger input: spatial_merge_size² patches concatenated
    out = vision["out_hidden_size"]
    attention = 3 * h * h + 3 * h + h * h + h  # qkv and proj, both with bias
    patch_embed = vision.get("in_chans", vision.get("in_channels", 3)) * vision["temporal_patch_size"]
    patch_embed *= vision["patch_size"] ** 2 * h
    if model_type == "qwen2_5_vl":
        block = 2 * h + attention + 3 * h * ffn + 2 * ffn + h  # RMSNorm ×2, gated MLP with biases
        merger = h + merged * merged + merged + merged * out + out  # RMSNorm over h, 2 linears
        return depth * block + merger + patch_embed
    if model_type in ("qwen3_vl", "qwen3_vl_moe"):  # one tower for the dense and the MoE language models
        block = 4 * h + attention + 2 * h * ffn + ffn + h  # LayerNorm ×2, plain MLP with biases
        linears = merged * merged + merged + merged * out + out
        main_merger = 2 * h + linears
        deepstack_mergers = len(vision.get("deepstack_visual_indexes", [])) * (2 * merged + linears)
        position_embedding = vision["num_position_embeddings"] * h
        return depth * block + main_merger + deepstack_mergers + patch_embed + h + position_embedding
    raise ValueError(f"vision tower of model_type {model_type!r} is not modelled; add it in vision_tower_params")

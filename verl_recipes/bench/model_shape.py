"""Random-init model folders for the benchmarks: Qwen2.5-1.5B's or 7B's shape (no hub, no real weights) or a tiny one."""

import os

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

# Qwen/Qwen2.5-1.5B-Instruct's config.json: 1.54 B parameters, tied embeddings, 2 KV heads.
SHAPES = {
    "qwen2.5-1.5b": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
    ),
    # Qwen/Qwen2.5-7B-Instruct's config.json: 7.62 B parameters, untied embeddings, 4 KV heads.
    "qwen2.5-7b": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
    ),
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    ),
}


def config(shape: str) -> Qwen2Config:
    if shape not in SHAPES:
        raise ValueError(f"model shape must be one of {sorted(SHAPES)}, got {shape!r}")
    hf_config = Qwen2Config(
        **SHAPES[shape],
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        hidden_act="silu",
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        use_sliding_window=False,
    )
    hf_config.architectures = ["Qwen2ForCausalLM"]
    return hf_config


def write(shape: str, path: str, weights: bool) -> str:
    """config.json (plus bf16 random weights if asked) under path; weights are built on the GPU when there is one."""
    os.makedirs(path, exist_ok=True)
    hf_config = config(shape)
    if not weights:
        hf_config.save_pretrained(path)
        return path
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM._from_config(hf_config, dtype=torch.bfloat16)
    model.save_pretrained(path)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return path

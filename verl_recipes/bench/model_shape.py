"""The benches' model shapes by name: a real Qwen2.5 shape (verl_recipes/random_models.py build, from
models/<hub id>/config.json; random init, no hub) or, for the CPU dry runs, a tiny Qwen2 with tied embeddings."""

from pathlib import Path

HUB_IDS = {"qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
           "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct"}
TINY = "tiny"
SHAPES = [*HUB_IDS, TINY]
# what a bench report says of its model
REPORTED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "vocab_size", "max_position_embeddings", "tie_word_embeddings")


def write(shape: str, folder: str | Path, weights: bool):
    """The shape's model folder (random bf16 weights when asked; the tiny model always has them); returns its config."""
    from transformers import AutoConfig

    from verl_recipes import random_models
    from verl_recipes.smoke.tiny import MODELS

    if shape not in SHAPES:
        raise ValueError(f"model shape must be one of {SHAPES}, got {shape!r}")
    if shape == TINY:
        MODELS["qwen2_tied"](Path(folder))
    else:
        random_models.build(Path(folder), HUB_IDS[shape], weights=weights)
    return AutoConfig.from_pretrained(folder)


def summary(shape: str, config) -> dict:
    return {"shape": shape, **{key: getattr(config, key) for key in REPORTED}}

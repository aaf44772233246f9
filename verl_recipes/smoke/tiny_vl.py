"""Tiny random-init vision-language models (Qwen2.5-VL, Qwen3-VL) and geometry3k-like rows for the one-GPU smoke.

verl_recipes/smoke/tiny.py registers them (MODELS, ROWS). A model folder holds what verl and vLLM load offline:
bf16 weights and config.json, a small BPE tokenizer with the Qwen-VL special tokens and the repository's tool chat
template, which renders an image as <|vision_start|><|image_pad|><|vision_end|> (the processor expands
<|image_pad|> to one token per merged patch), and the processor configs laid out as on the hub. The processor is
written as config files rather than built, because transformers' Qwen-VL processors need a video processor, which
needs torchvision.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

from verl_recipes.smoke.tiny_moe import MOE
from verl_recipes.smoke.tokenizer import tiny_tokenizer

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
           "<|image_pad|>", "<|video_pad|>"]
# Image side lengths of the tiny rows: 2x2 to 3x3 merged patches (28 px each on Qwen2.5-VL), so a prompt with
# its image stays far below configs/smoke/tiny_gpu's max_prompt_length of 128 tokens.
IMAGE_SIDES = (56, 70, 84)
HEAD_DIM = 64
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def _problem(rng: random.Random) -> tuple[str, str]:
    base, height = rng.randint(2, 20), 2 * rng.randint(1, 10)
    return f"<image>Find the area of the triangle with base {base} and height {height}.", str(base * height // 2)


def _diagram(rng: random.Random) -> Image.Image:
    side = rng.choice(IMAGE_SIDES)
    image = Image.new("RGB", (side, side), "white")
    corners = [(rng.randint(0, side - 1), rng.randint(0, side - 1)) for _ in range(3)]
    ImageDraw.Draw(image).polygon(corners, outline="black")
    return image


def geo3k_rows(split: str, n: int, rng: random.Random) -> list[dict]:
    """Rows as `python -m verl_recipes.data.prepare geo3k` writes them (verl_recipes/data/geo3k.geo3k_row), tiny images."""
    from verl_recipes.data.geo3k import geo3k_row

    rows = []
    for i in range(n):
        problem, answer = _problem(rng)
        row = geo3k_row({"problem": problem, "answer": answer, "images": [_diagram(rng)]}, note=lambda message: None)
        row["extra_info"] = {**row["extra_info"], "split": split, "index": i}
        rows.append(row)
    return rows


def deepeyes_rows(split: str, n: int, rng: random.Random) -> list[dict]:
    """Rows as `python -m verl_recipes.data.prepare deepeyes` writes them (verl_recipes/data/deepeyes.deepeyes_row)."""
    from verl_recipes.data.deepeyes import deepeyes_row

    rows = []
    for i in range(n):
        problem, answer = _problem(rng)
        source = {"data_source": "vstar", "prompt": [{"role": "user", "content": problem}], "images": [_diagram(rng)],
                  "reward_model": {"style": "rule", "ground_truth": answer}, "extra_info": {}}
        row = deepeyes_row(source, note=lambda message: None)
        row["extra_info"] = {**row["extra_info"], "split": split, "index": i}
        rows.append(row)
    return rows


def _tokenizer(folder: Path, rng: random.Random):
    """A byte-level BPE trained on tiny geo3k prompts and answers, so the real instruction text takes few tokens."""
    corpus = []
    for row in geo3k_rows("train", 100, rng):
        answer = row["reward_model"]["ground_truth"]
        corpus += [row["prompt"][0]["content"], f"<think> so the area is {answer} </think> \\boxed{{{answer}}}"]
    return tiny_tokenizer(folder, corpus, SPECIAL)


def _special_ids(tok) -> dict:
    return {name: tok.convert_tokens_to_ids(token) for name, token in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}


def _text_config(tok, mrope_section: list[int], **extra) -> dict:
    """4 layers, 4 heads of HEAD_DIM (a size vLLM's attention kernels support), GQA 2, vocab padded to 64."""
    pad, eos = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
    return dict(vocab_size=(len(tok) + 63) // 64 * 64, hidden_size=4 * HEAD_DIM, intermediate_size=8 * HEAD_DIM,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                bos_token_id=pad, eos_token_id=eos, pad_token_id=pad,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": mrope_section}, **extra)


FUSED_EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


def hub_layout(state: dict) -> dict:
    """The fused experts as the hub's Qwen3-VL-MoE checkpoints store them, [experts, in, out]: transformers 5 holds
    them as [experts, out, in] and transposes on load, but saves a model built from a config in its own layout.
    Megatron-Bridge exports in the checkpoint's layout and vLLM transposes what it receives, so with transformers'
    layout the first weight push into vLLM failed (`The size of tensor a (128) must match ... b (256)`, 2 x H200,
    2026-11-26)."""
    return {k: v.transpose(1, 2).contiguous() if k.endswith(FUSED_EXPERTS) else v for k, v in state.items()}


def _save(folder: Path, tok, config, processor_files: dict[str, dict], seed: int) -> Path:
    import torch
    from transformers import AutoModelForImageTextToText

    config.tie_word_embeddings = False
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config).to(torch.bfloat16)
    state = model.state_dict()
    if any(name.endswith(FUSED_EXPERTS) for name in state):
        # transformers' reversal on save (save_original_format) would turn hub_layout's experts back: its Transpose
        # flips any tensor whose shape is not the parameter's. These models' names are already the hub's.
        model.save_pretrained(folder, state_dict=hub_layout(state), save_original_format=False)
    else:  # the reversal gives Qwen2.5-VL its hub names (model.layers.*, visual.*)
        model.save_pretrained(folder)
    pad, eos = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
    (folder / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": pad, "eos_token_id": [eos, pad], "pad_token_id": pad, "do_sample": True}))
    for name, content in processor_files.items():
        (folder / name).write_text(json.dumps(content, indent=1))
    return folder


def build_qwen2_5_vl(folder: Path, seed: int = 0) -> Path:
    """A 4-layer Qwen2.5-VL with a 2-block vision tower; patch 14, 2x2 merge, as the real model."""
    from transformers import Qwen2_5_VLConfig

    folder.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(folder, random.Random(seed))
    text = _text_config(tok, mrope_section=[8, 12, 12])  # sums to HEAD_DIM / 2
    vision = dict(depth=2, hidden_size=128, intermediate_size=256, num_heads=2, out_hidden_size=text["hidden_size"],
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                  fullatt_block_indexes=[1])
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **_special_ids(tok))
    config.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    # the hub's Qwen2.5-VL ships one preprocessor config; the video processor falls back to it
    preprocessor = {"image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
                    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
                    "merge_size": 2, "image_mean": CLIP_MEAN, "image_std": CLIP_STD}
    return _save(folder, tok, config, {"preprocessor_config.json": preprocessor}, seed)


def _qwen3_vl(folder: Path, seed: int, config_class, architecture: str, **text_extra) -> Path:
    """A 4-layer Qwen3-VL language model with a 2-block vision tower (one deepstack merger); patch 16, 2x2 merge, as
    the real models."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(folder, random.Random(seed))
    text = _text_config(tok, mrope_section=[12, 10, 10], head_dim=HEAD_DIM, **text_extra)
    text["rope_parameters"]["mrope_interleaved"] = True
    vision = dict(depth=2, hidden_size=128, intermediate_size=256, num_heads=2, out_hidden_size=text["hidden_size"],
                  patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64,
                  deepstack_visual_indexes=[0])
    config = config_class(text_config=text, vision_config=vision, **_special_ids(tok))
    config.architectures = [architecture]
    common = {"processor_class": "Qwen3VLProcessor", "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
              "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
    files = {  # the hub's Qwen3-VL layout: separate image and video processor configs
        "preprocessor_config.json": {"image_processor_type": "Qwen2VLImageProcessor",
                                     "size": {"shortest_edge": 65536, "longest_edge": 16777216}, **common},
        "video_preprocessor_config.json": {"video_processor_type": "Qwen3VLVideoProcessor",
                                           "size": {"shortest_edge": 4096, "longest_edge": 25165824}, **common},
    }
    return _save(folder, tok, config, files, seed)


def build_qwen3_vl(folder: Path, seed: int = 0) -> Path:
    """Qwen3-VL (dense)."""
    from transformers import Qwen3VLConfig

    return _qwen3_vl(folder, seed, Qwen3VLConfig, "Qwen3VLForConditionalGeneration")


def build_qwen3_vl_moe(folder: Path, seed: int = 0) -> Path:
    """Qwen3-VL-MoE (Qwen3-VL-30B-A3B's architecture) with the experts of tiny_moe.MOE."""
    from transformers import Qwen3VLMoeConfig

    # 96-wide experts: no expert matrix is square ([96 | 192] x 256), so the bridge's and vLLM's shape-based layout
    # guesses cannot silently take a transposed weight for the right one (128-wide, gate_up would be 256 x 256)
    return _qwen3_vl(folder, seed, Qwen3VLMoeConfig, "Qwen3VLMoeForConditionalGeneration",
                     **{**MOE, "moe_intermediate_size": 96})

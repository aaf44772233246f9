"""The tokenizer of the tiny vision-language models (Qwen2.5-VL, Qwen3-VL; verl_recipes/random_models.py builds them)
and geometry3k-like rows for the one-GPU smoke.

verl_recipes/smoke/tiny.py registers them (MODELS, ROWS). The tokenizer is a small BPE with the Qwen-VL special tokens
and the repository's tool chat template, which renders an image as <|vision_start|><|image_pad|><|vision_end|> (the
processor expands <|image_pad|> to one token per merged patch).
"""

from __future__ import annotations

import random
from pathlib import Path

from PIL import Image, ImageDraw

from verl_recipes.smoke.tokenizer import tiny_tokenizer

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
           "<|image_pad|>", "<|video_pad|>"]
# Image side lengths of the tiny rows: 2x2 to 3x3 merged patches (28 px each on Qwen2.5-VL), so a prompt with
# its image stays far below configs/smoke/tiny_gpu's max_prompt_length of 128 tokens.
IMAGE_SIDES = (56, 70, 84)


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


def build_tokenizer(folder: Path, rng: random.Random):
    """A byte-level BPE trained on tiny geo3k prompts and answers, so the real instruction text takes few tokens."""
    corpus = []
    for row in geo3k_rows("train", 100, rng):
        answer = row["reward_model"]["ground_truth"]
        corpus += [row["prompt"][0]["content"], f"<think> so the area is {answer} </think> \\boxed{{{answer}}}"]
    return tiny_tokenizer(folder, corpus, SPECIAL)

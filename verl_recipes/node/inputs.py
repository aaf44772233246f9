"""A node run's inputs, made on the GPU node: the model at the recipe's real shape (random init, built by
verl_recipes.random_models) and prompts of the task's prompt length, in the layout of the recipe's datasets
(verl_recipes.data.prepare.outputs), so the recipe reads them through its own data fragment (RL_DATA_DIR).

Prompt length: each prompt is as long as verl's own length filter keeps at data.max_prompt_length (verl's dataset
class with the recipe's data config, tokenizer and processor, as the trainer builds them: chat template, image tokens
and tool schemas counted as verl counts them). A filler of random words is sized against that filter (fit_chars), so
no tokenizer detail is re-implemented here. Vision rows carry one image of up to half the prompt's tokens
(IMAGE_SHARE), within the recipe's pixel budget (data.mm_processor_kwargs.max_pixels); a drawn polygon on white, so
the parquet stays small. Rows come from the data preparation's own row converters, so columns, templates and
agent_name are the recipe's.
"""

from __future__ import annotations

import math
import random
import string
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf
from PIL import Image, ImageDraw

from verl_recipes.catalog import RecipeError

IMAGE_SHARE = 0.5  # at most this share of the prompt's tokens is image
PIXELS_PER_TOKEN = 28 * 28  # Qwen2.5-VL: a 2 x 2 merge of 14 px patches (Qwen3-VL's 32 px tokens make fewer)
SIDE_STEP = 224  # image sides in multiples of 224 px: whole patches for both 28 and 32 px tokens
GRID = 64  # filler lengths tried per round of fit_chars
OTHER_ROWS = 8  # rows of the files a node run never trains on (validation)


def build_model(folder: Path, hub_id: str, layers: int | None, seed: int = 0) -> Path:
    """The recipe's model shape with random weights, a tokenizer over its whole vocabulary (and its processor)."""
    from verl_recipes import random_models  # builds on the GPU; the CPU side never needs it

    return random_models.build(folder, hub_id, seed=seed, layers=layers)


def words(rng: random.Random, chars: int) -> str:
    """Random lowercase words, exactly `chars` characters long."""
    out, length = [], 0
    while length < chars:
        out.append("".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) + " ")
        length += len(out[-1])
    return "".join(out)[:chars]


def image_size(cfg: DictConfig) -> tuple[int, int]:
    """Width and height (2:1) of the prompt image: the pixel budget or IMAGE_SHARE of the prompt, the smaller."""
    budget = IMAGE_SHARE * cfg.data.max_prompt_length * PIXELS_PER_TOKEN
    max_pixels = OmegaConf.select(cfg, "data.mm_processor_kwargs.max_pixels", default=None)
    budget = min(budget, max_pixels or budget)
    height = max(SIDE_STEP, int(math.sqrt(budget / 2)) // SIDE_STEP * SIDE_STEP)
    return 2 * height, height


def drawing(rng: random.Random, size: tuple[int, int]) -> Image.Image:
    image = Image.new("RGB", size, "white")
    corners = [(rng.randrange(size[0]), rng.randrange(size[1])) for _ in range(4)]
    ImageDraw.Draw(image).polygon(corners, outline="black", width=3)
    return image


def _ignore(message: str) -> None:
    pass


def _text_row(dataset: str, text: str, image) -> dict:
    if dataset == "gsm8k_math":
        from verl_recipes.data.gsm8k_math import GSM8K_BOXED, _row

        return _row(GSM8K_BOXED, text, "0", "0")
    from verl_recipes.data.dapo_math import _row

    return _row("math_dapo", text, "0", retool=dataset == "dapo_math_retool")


def _geo3k_row(text: str, image) -> dict:
    from verl_recipes.data.geo3k import geo3k_row

    return geo3k_row({"problem": f"<image>{text}", "answer": "0", "images": [image]}, _ignore)


def _deepeyes_row(text: str, image) -> dict:
    from verl_recipes.data.deepeyes import deepeyes_row

    source = {"data_source": "vstar", "prompt": [{"role": "user", "content": f"<image>{text}"}], "images": [image],
              "reward_model": {"style": "rule", "ground_truth": "0"}, "extra_info": {}}
    return deepeyes_row(source, _ignore)


# dataset (a card's `data:` entry) -> (row from a problem text and an image, whether it takes an image)
ROWS: dict[str, tuple[Callable[[str, object], dict], bool]] = {
    "gsm8k_math": (partial(_text_row, "gsm8k_math"), False),
    "dapo_math": (partial(_text_row, "dapo_math"), False),
    "dapo_math_retool": (partial(_text_row, "dapo_math_retool"), False),
    "geo3k": (_geo3k_row, True),
    "deepeyes": (_deepeyes_row, True),
}


def verl_filter(cfg: DictConfig) -> Callable[[list[dict]], list[bool]]:
    """Which rows verl's own length filter keeps at data.max_prompt_length, with the tokenizer and processor verl's
    trainer builds from cfg (actor_rollout_ref.model: its path, chat template and processor)."""
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.config import omega_conf_to_dataclass

    model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    data = OmegaConf.merge(cfg.data, {"filter_overlong_prompts": True, "filter_overlong_prompts_workers": 1,
                                      "shuffle": False})

    def kept(rows: list[dict]) -> list[bool]:
        with tempfile.TemporaryDirectory(prefix="node-prompts-") as scratch:
            path = Path(scratch) / "rows.parquet"
            pd.DataFrame([{**row, "extra_info": {**row["extra_info"], "index": i}}
                          for i, row in enumerate(rows)]).to_parquet(path)
            OmegaConf.update(data, "cache_dir", scratch)
            dataset = create_rl_dataset([str(path)], data, model.tokenizer, model.processor, is_train=True)
            survivors = {int(item["extra_info"]["index"]) for item in dataset.dataframe}
        return [i in survivors for i in range(len(rows))]

    return kept


def fit_chars(make: Callable[[int], dict], kept: Callable[[list[dict]], list[bool]], limit: int) -> int:
    """The longest filler (characters, at most `limit`) whose row `kept` keeps, to the character: GRID-point searches,
    each between the longest kept and the shortest dropped of the one before."""
    low, high = 0, limit
    if not kept([make(0)])[0]:
        raise RecipeError("a prompt with no filler is already longer than data.max_prompt_length (its template, tool "
                          "schemas and image); raise max_prompt_length or the pixel budget's share (IMAGE_SHARE)")
    while high - low > 1:
        grid = sorted({low + (high - low) * i // (GRID - 1) for i in range(GRID)})
        flags = kept([make(chars) for chars in grid])
        low = max(chars for chars, keep in zip(grid, flags) if keep)
        high = min((chars for chars, keep in zip(grid, flags) if not keep and chars > low), default=low)
    return low


def prompt_rows(make: Callable[[int], dict], kept: Callable[[list[dict]], list[bool]], count: int,
                chars: int) -> list[dict]:
    """`count` rows at the longest filler kept; random words tokenize to slightly different lengths, so a row over the
    limit is dropped and the filler shortened (2% a round) until enough are kept."""
    rows = []
    while len(rows) < count and chars > 0:
        batch = [make(chars) for _ in range(count - len(rows) + count // 8 + 1)]
        rows += [row for row, keep in zip(batch, kept(batch)) if keep][: count - len(rows)]
        chars = int(chars * 0.98)
    if len(rows) < count:
        raise RecipeError(f"only {len(rows)} of {count} prompts fit data.max_prompt_length")
    return rows


def train_rows(cfg: DictConfig) -> int:
    """Prompts the run draws: a batch a step, and the batches DAPO's group filter keeps in flight beyond them."""
    filter_groups = cfg.algorithm.get("filter_groups") or {}
    ahead = int(filter_groups.get("max_inflight_gen_batches") or 1) if filter_groups.get("enable") else 1
    return int(cfg.data.train_batch_size) * (int(cfg.trainer.total_training_steps) + ahead)


def write_prompts(cfg: DictConfig, datasets: list[str], data_dir: Path, seed: int = 0,
                  kept: Callable[[list[dict]], list[bool]] | None = None) -> list[Path]:
    """Every file of each dataset: train with train_rows(cfg) prompts, the others OTHER_ROWS; `kept`: the length
    filter (verl's, from cfg, by default)."""
    from verl_recipes.data.prepare import outputs

    kept = kept or verl_filter(cfg)
    written = []
    for dataset in datasets:
        if dataset not in ROWS:
            raise RecipeError(f"no node prompts for dataset '{dataset}': add a row maker to verl_recipes/node/inputs.py "
                              f"ROWS")
        row, takes_image = ROWS[dataset]
        rng = random.Random(seed)
        size = image_size(cfg) if takes_image else None

        def make(chars: int, row=row, size=size, rng=rng) -> dict:
            return row(words(rng, chars), drawing(rng, size) if size else None)

        chars = fit_chars(make, kept, limit=16 * int(cfg.data.max_prompt_length))
        rows = prompt_rows(make, kept, train_rows(cfg), chars)
        for path in outputs(dataset, data_dir / dataset):
            path.parent.mkdir(parents=True, exist_ok=True)
            chosen = rows if path.stem == "train" else rows[:OTHER_ROWS]
            pd.DataFrame([{**r, "extra_info": {**r["extra_info"], "split": path.stem, "index": i}}
                          for i, r in enumerate(chosen)]).to_parquet(path)
            written.append(path)
    return written

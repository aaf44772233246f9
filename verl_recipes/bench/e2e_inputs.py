"""Inputs of the end-to-end bench: prompts of the long-tail prompt lengths (lengths.py), written where
`verl_recipes.data.prepare gsm8k_math` writes, so a recipe reads them through its own data fragment (RL_DATA_DIR).

The model is model_shape's random-init one of a real shape (verl_recipes/random_models.py build): its tokenizer is
byte-level BPE without merges over the whole vocabulary, so any id a random model samples decodes, and a prompt of k
lowercase letters is k tokens plus the chat template's TEMPLATE_TOKENS.
"""

import string
from pathlib import Path

import numpy as np
import pandas as pd

from verl_recipes.bench import lengths

DATASET = "gsm8k_math"  # the recipes' dataset name: its files, not its content
DATA_SOURCE = "openai/gsm8k"  # a data source verl's default reward knows (the verl_example arm uses it)
# the repository's chat template around one user turn: its default system turn, the user turn, the generation prompt
TEMPLATE_TOKENS = 57


def rows(split: str, num: int, seed: int) -> list[dict]:
    prompt_lengths = lengths.sample(num, max_response=1, seed=seed).prompts
    rng = np.random.default_rng(seed)
    letters = np.array(list(string.ascii_lowercase))
    out = []
    for i, length in enumerate(prompt_lengths):
        text = "".join(rng.choice(letters, size=int(length) - TEMPLATE_TOKENS))
        out.append({"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": text}], "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": "0"}, "extra_info": {"split": split, "index": i}})
    return out


def write_data(data_dir: Path, num_prompts: int, seed: int = 0) -> list[Path]:
    """train (num_prompts rows) and test files in the layout verl_recipes.data.prepare.outputs names."""
    from verl_recipes.data.prepare import outputs

    written = []
    for path in outputs(DATASET, data_dir / DATASET):
        path.parent.mkdir(parents=True, exist_ok=True)
        size = num_prompts if path.stem == "train" else 8
        pd.DataFrame(rows(path.stem, size, seed + (path.stem != "train"))).to_parquet(path)
        written.append(path)
    return written

"""Inputs of the end-to-end bench: a random-init model of a real shape with a tokenizer over its whole vocabulary, and
prompts of the long-tail prompt lengths (lengths.py), written where `verl_recipes.data.prepare gsm8k_math` writes,
so a recipe reads them through its own data fragment (RL_DATA_DIR). Nothing comes from a hub.

The tokenizer is byte-level BPE without merges (write_tokenizer), so any id a random model samples decodes, and a
prompt of k lowercase letters is k tokens plus the chat template's TEMPLATE_TOKENS.
"""

import json
import string
from pathlib import Path

import numpy as np
import pandas as pd

from verl_recipes.bench import lengths, model_shape

DATASET = "gsm8k_math"  # the recipes' dataset name: its files, not its content
DATA_SOURCE = "openai/gsm8k"  # a data source verl's default reward knows (the verl_example arm uses it)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2: model_shape's pad, bos and eos
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TEMPLATE_TOKENS = 19  # <|im_start|> u s e r \n ... <|im_end|> \n <|im_start|> a s s i s t a n t \n


def write_tokenizer(folder: Path, vocab_size: int):
    """Byte-level BPE without merges (the kind transformers loads as Qwen2Tokenizer for a qwen2 config): ids 0-2 the
    special tokens, then the 256 byte symbols, so one ASCII letter is one token; the rest fillers "x<i>", which only a
    model's output contains and which decode like any token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    symbols = SPECIAL + sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: i for i, symbol in enumerate(symbols)}
    vocab.update({f"x{i}": i for i in range(len(symbols), vocab_size)})
    tok = Tokenizer(models.BPE(vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIAL[2], pad_token=SPECIAL[0],
                                     additional_special_tokens=SPECIAL[1:], model_max_length=32768)
    hf_tok.chat_template = TEMPLATE
    hf_tok.save_pretrained(folder)
    return hf_tok


def write_model(shape: str, folder: Path, weights: bool) -> Path:
    """model_shape's folder (random bf16 weights when asked) plus the tokenizer and a generation config ending on eos."""
    model_shape.write(shape, str(folder), weights)
    config = model_shape.config(shape)
    write_tokenizer(folder, config.vocab_size)
    (folder / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id,
         "pad_token_id": config.pad_token_id, "do_sample": True}))
    return folder


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

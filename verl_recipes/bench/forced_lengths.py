"""Realistic response lengths from a random-weight model: each request stops at a length drawn from lengths.py.

A random model almost never samples EOS, so every response would run to the maximum. We do not raise the EOS logit
in the weights: a fixed per-token stop probability gives geometric (memoryless) lengths, which cannot have both the
log-normal body (median ~1000) and 10% of the samples at the maximum, and a random model's hidden state carries no
position signal that could make the stop probability grow with length. Instead the vLLM engine, through its own
logits-processor interface (verl_recipes/runtime/vllm_forced_lengths.py, loaded with
`rollout.engine_kwargs.vllm.logits_processors`), draws each request's target from lengths.response_target, masks EOS
before it and forces EOS on it; a target equal to the request's max_tokens is the truncated 10% (EOS masked to the end).
This sits in the engine, below verl's agent loops, so sync, separate_async and fully async runs get the same rule.

Key of a draw: the prompt's tokens and how many times this engine has seen that prompt, so the n samples of a GRPO
group get n different lengths, and arms that send the same prompts get the same lengths. Limit: a partial rollout
resumed after a weight sync arrives as a new prompt (prompt + partial response) and draws a fresh target for the rest.
verl's response_length/* metrics record what was realised.
"""

import hashlib
from collections import Counter

import numpy as np
import torch

from verl_recipes.bench.lengths import RESPONSE_MEDIAN, response_target


def eos_ids(*values) -> list[int]:
    """Every stop id among `values` (each an id, a list of ids or None): the model config's eos_token_id and the
    generation config's, which vLLM also stops on; masking only one would let a random model stop on the other."""
    found = set()
    for value in values:
        found.update(value if isinstance(value, (list, tuple)) else [] if value is None else [value])
    return sorted(found)


def model_eos_ids(hf_config, generation: dict | None, where: str) -> list[int]:
    """The stop ids of a model: its config's, its text config's and its generation config's. A VL config in
    transformers 5 keeps eos_token_id on its text config only (Qwen2_5_VLConfig has no attribute of its own: the first
    Qwen2.5-VL node run died on it, results/node/README.md)."""
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    ids = eos_ids(getattr(hf_config, "eos_token_id", None), getattr(text, "eos_token_id", None),
                  (generation or {}).get("eos_token_id"))
    if not ids:
        raise ValueError(f"forced lengths: {where} names no eos_token_id (config, text config or generation config); "
                         "without one the lengths cannot be forced")
    return ids


def request_key(prompt_ids, occurrence: int) -> int:
    digest = hashlib.blake2b(np.asarray(prompt_ids, dtype=np.int64).tobytes(), digest_size=8,
                             key=occurrence.to_bytes(8, "little"))
    return int.from_bytes(digest.digest(), "little")


class ForcedLengths:
    """Targets of the requests in a batch, by row; apply() edits the rows' logits in place."""

    def __init__(self, eos_ids: list[int], median: float = RESPONSE_MEDIAN):
        self.eos_ids = list(eos_ids)
        self.median = median
        self.seen = Counter()
        self.rows = {}  # row -> (target length, max_tokens, the request's live output token list)

    def add(self, row: int, prompt_ids, max_tokens: int, output_ids: list) -> int:
        prompt_key = tuple(prompt_ids)
        key = request_key(prompt_ids, self.seen[prompt_key])
        self.seen[prompt_key] += 1
        target = response_target(key, max_tokens, self.median)
        self.rows[row] = (target, max_tokens, output_ids)
        return target

    def remove(self, row: int) -> None:
        self.rows.pop(row, None)

    def move(self, source: int, dest: int, swap: bool) -> None:
        """vLLM's MovedRequest: a swap exchanges two rows; otherwise source's request now sits at dest."""
        moving = self.rows.pop(source, None)
        if swap:
            if dest in self.rows:
                self.rows[source] = self.rows.pop(dest)
        else:
            self.rows.pop(dest, None)
        if moving is not None:
            self.rows[dest] = moving

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """EOS is impossible before a row's target and certain on it (the target-th token is EOS)."""
        for row, (target, max_tokens, output_ids) in self.rows.items():
            if target < max_tokens and len(output_ids) + 1 >= target:
                logits[row, :] = float("-inf")
                logits[row, self.eos_ids] = 0.0
            else:
                logits[row, self.eos_ids] = float("-inf")
        return logits

"""Realistic response lengths from a random-weight model: each request stops at a length drawn from lengths.py.

A random model almost never samples EOS, so every response would run to the maximum. We do not raise the EOS logit
in the weights: a fixed per-token stop probability gives geometric (memoryless) lengths, which cannot have both the
log-normal body (median ~1000) and 10% of the samples at the maximum, and a random model's hidden state carries no
position signal that could make the stop probability grow with length. Instead each request gets its target as its
max_tokens, with ignore_eos, at verl's rollout server (verl_recipes/runtime/forced_lengths.py, for vLLM and SGLang
alike): a target equal to the request's cap is the truncated 10%. This sits below verl's agent loops, so sync,
separate_async and fully async runs get the same rule, and it costs the engine nothing per decode step. The engine's
logits-processor interface did the same until 2026-11-29 and cost a third of vLLM's decode rate (bench/README.md).

Key of a draw: the prompt's tokens and how many times this server has seen that prompt, so the n samples of a GRPO
group get n different lengths, and arms that send the same prompts get the same lengths. Limit: a partial rollout
resumed after a weight sync arrives as a new prompt (prompt + partial response) and draws a fresh target for the rest.
verl's response_length/* metrics record what was realised.
"""

import hashlib
from collections import Counter

import numpy as np

from verl_recipes.bench.lengths import RESPONSE_MEDIAN, response_target


def request_key(prompt: bytes, occurrence: int) -> int:
    digest = hashlib.blake2b(prompt, digest_size=8, key=occurrence.to_bytes(8, "little"))
    return int.from_bytes(digest.digest(), "little")


class ForcedLengths:
    """The response length of each request one server receives."""

    def __init__(self, median: float = RESPONSE_MEDIAN):
        self.median = median
        self.seen = Counter()  # prompt tokens (int64 bytes) -> requests with that prompt so far

    def target(self, prompt_ids, max_tokens: int) -> int:
        """This request's length, at most max_tokens; prompt_ids as a list, an array or a tensor (on any device)."""
        ids = prompt_ids.tolist() if hasattr(prompt_ids, "tolist") else prompt_ids
        prompt = np.asarray(ids, dtype=np.int64).tobytes()
        key = request_key(prompt, self.seen[prompt])
        self.seen[prompt] += 1
        return response_target(key, max_tokens, self.median)

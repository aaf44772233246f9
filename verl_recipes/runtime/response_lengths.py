"""Realistic response lengths from a random-weight model: the long-tail distribution every benchmark imposes, and the
per-request draw that stops each request of the end-to-end bench and node runs at its length.

A random model almost never samples EOS, so every response would run to the maximum. We do not raise the EOS logit
in the weights: a fixed per-token stop probability gives geometric (memoryless) lengths, which cannot have both the
log-normal body (median ~1000) and 10% of the samples at the maximum, and a random model's hidden state carries no
position signal that could make the stop probability grow with length. Instead each request gets its target as its
max_tokens, with ignore_eos, at verl's rollout server (forced_lengths.py beside this, for vLLM and SGLang alike): a
target equal to the request's cap is the truncated 10%. This sits below verl's agent loops, so sync, separate_async
and fully async runs get the same rule, and it costs the engine nothing per decode step. The engine's logits-processor
interface did the same until 2026-11-29 and cost a third of vLLM's decode rate (bench/README.md).

Key of a draw: the prompt's tokens and how many times this server has seen that prompt, so the n samples of a GRPO
group get n different lengths, and arms that send the same prompts get the same lengths. Limit: a partial rollout
resumed after a weight sync arrives as a new prompt (prompt + partial response) and draws a fresh target for the rest.
verl's response_length/* metrics record what was realised.

Here, in the runtime part, because verl's rollout servers draw in a cluster job's processes, which ship runtime/ alone;
verl_recipes/bench/lengths.py samples whole batches from the same distribution.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np

RESPONSE_MEDIAN = 1000
RESPONSE_SIGMA = 0.9
TRUNCATED_FRACTION = 0.1


def response_target(key: int, max_response: int, median: float = RESPONSE_MEDIAN) -> int:
    """One response length from the distribution of bench/lengths.sample, for one request: with probability
    TRUNCATED_FRACTION the maximum, else the clipped log-normal. The same key always gives the same length."""
    rng = np.random.default_rng(key)
    if rng.random() < TRUNCATED_FRACTION:
        return max_response
    return int(np.clip(np.round(np.exp(rng.normal(np.log(median), RESPONSE_SIGMA))), 1, max_response))


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

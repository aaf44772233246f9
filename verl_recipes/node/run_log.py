"""What a node run's log (verl's output with Ray's and vLLM's lines: launch.py VERL_LOG) says about memory: each vLLM
engine's KV cache and any out-of-memory error (the preemptions: verl_recipes/runtime/vllm_preemptions.py total).

vLLM v1 logs its KV cache once per engine at start-up, as "GPU KV cache size: 1,234,567 tokens" and "Maximum
concurrency for 3,072 tokens per request: 401.90x" (one line or two, by version; vllm/v1/core/kv_cache_utils.py).
"""

from __future__ import annotations

import re

KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
# torch's CUDA allocator, NCCL and vLLM's start-up memory check, each in its own words
OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory|No available memory for the cache blocks", re.I)


def kv_cache_tokens(log: str) -> list[int]:
    """Each engine's KV cache, in tokens."""
    return [int(tokens.replace(",", "")) for tokens in KV_TOKENS.findall(log)]


def max_concurrency(log: str) -> list[float]:
    """Each engine's concurrency at its max_model_len, as vLLM computes it."""
    return [float(times) for _, times in CONCURRENCY.findall(log)]


def oom_lines(log: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if OOM.search(line)]

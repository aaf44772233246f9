"""The end-to-end bench's and node runs' response lengths (response_lengths.py beside this) at verl's rollout
servers: each request's max_tokens becomes its drawn target, with ignore_eos.

verl 0.9.1's vLLMHttpServer.generate and SGLangHttpServer.generate take a request's sampling params as a dict and read
max_tokens (SGLang's max_new_tokens too) and ignore_eos from it, before their engine sees the request; the wrapper
sets both. One ForcedLengths per server process: one engine's requests, as the draw's key wants. A cap the caller
set (a multi-turn budget) stays the cap; without one it is the rollout's response_length, which verl then clamps to
the context as it would have. Until 2026-11-29 a vLLM logits processor forced EOS at the target instead; it cost the
engine a third of its decode rate (bench/README.md) and had no SGLang counterpart.

verl loads this module in every process (the `verl.plugins` entry point in pyproject.toml). Without the variable it
does nothing; the bench (verl_recipes/bench/e2e_arms.py) and node runs (verl_recipes/node/overrides.yaml) set it for
a run's Ray workers.
"""

from __future__ import annotations

import functools
import os

from verl_recipes.runtime.after_import import after_import
from verl_recipes.runtime.response_lengths import ForcedLengths

LENGTHS_ENV = "VERL_RECIPES_FORCED_LENGTHS"
SERVERS = {"verl.workers.rollout.vllm_rollout.vllm_async_server": "vLLMHttpServer",
           "verl.workers.rollout.sglang_rollout.async_sglang_server": "SGLangHttpServer"}
MARK = "_forces_lengths"


def forcing(generate):
    """A server's generate(self, prompt_ids, sampling_params, request_id, ...) that asks for the drawn length."""
    lengths = ForcedLengths()

    @functools.wraps(generate)
    async def wrapped(self, prompt_ids, sampling_params, request_id, *args, **kwargs):
        params = dict(sampling_params)
        cap = params.pop("max_new_tokens", None) or params.pop("max_tokens", None) or self.config.response_length
        params.update(max_tokens=lengths.target(prompt_ids, cap), ignore_eos=True)
        return await generate(self, prompt_ids, params, request_id, *args, **kwargs)

    setattr(wrapped, MARK, True)
    return wrapped


def patch(module) -> None:
    cls = getattr(module, SERVERS[module.__name__])
    if not hasattr(cls.generate, MARK):
        cls.generate = forcing(cls.generate)


if os.environ.get(LENGTHS_ENV) == "1":
    for name in SERVERS:
        after_import(name, patch)

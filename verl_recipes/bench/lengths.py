"""The long-tail length distribution both benchmarks impose (a few long responses dominate a step, as in GRPO rollouts).

Prompts ~ U(min_prompt, max_prompt) tokens; responses ~ log-normal (median 1000, sigma 0.9) clipped at
max_response, with exactly 10% of the samples set to max_response (the truncation spike of RL math traces).
Seeded, so every arm and every run sees the same sequences. The distribution's constants, and its one-request draw by a
key that the end-to-end bench's rollout servers stop each request at, live in verl_recipes/runtime/response_lengths.py
(a cluster job ships runtime/ alone).
"""

from dataclasses import dataclass

import numpy as np

from verl_recipes.runtime.response_lengths import RESPONSE_MEDIAN, RESPONSE_SIGMA, TRUNCATED_FRACTION


@dataclass(frozen=True)
class Lengths:
    prompts: np.ndarray
    responses: np.ndarray

    @property
    def totals(self) -> np.ndarray:
        return self.prompts + self.responses

    def summary(self) -> dict:
        """The realised distribution, as the JSON reports it."""
        return {
            "sequences": int(self.prompts.size),
            "prompt_mean": round(float(self.prompts.mean()), 1),
            "prompt_max": int(self.prompts.max()),
            "response_mean": round(float(self.responses.mean()), 1),
            "response_median": float(np.median(self.responses)),
            "response_max": int(self.responses.max()),
            "total_tokens": int(self.totals.sum()),
            "total_mean": round(float(self.totals.mean()), 1),
            "total_max": int(self.totals.max()),
        }


def sample(
    num: int,
    max_response: int,
    min_prompt: int = 100,
    max_prompt: int = 600,
    median: float = RESPONSE_MEDIAN,
    seed: int = 0,
) -> Lengths:
    """num prompt/response length pairs; median is scaled down with max_response for tiny dry runs."""
    if num < 1 or max_response < 1 or not 1 <= min_prompt <= max_prompt:
        raise ValueError(
            f"need num >= 1, max_response >= 1 and 1 <= min_prompt <= max_prompt; got num={num}, "
            f"max_response={max_response}, min_prompt={min_prompt}, max_prompt={max_prompt}"
        )
    rng = np.random.default_rng(seed)
    prompts = rng.integers(min_prompt, max_prompt + 1, size=num)
    responses = np.exp(rng.normal(np.log(median), RESPONSE_SIGMA, size=num))
    responses = np.clip(np.round(responses), 1, max_response).astype(np.int64)
    truncated = rng.choice(num, size=round(TRUNCATED_FRACTION * num), replace=False)
    responses[truncated] = max_response
    return Lengths(prompts=prompts.astype(np.int64), responses=responses)

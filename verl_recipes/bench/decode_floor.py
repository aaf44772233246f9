"""The HBM floor of a generation run (every decode step reads every weight and the live KV cache once from HBM), for a dense decoder such as Qwen2.5.

Each decode step reads every weight once plus the KV cache of every running sequence, and does
2 x N FLOPs per token plus attention over the context:
    bytes_step = W_read + kv_bytes_per_token x sum_j c_j
    flops_step = 2 N (B + prefill tokens admitted this step) + 4 n_h d L x sum_j c_j
    t_step    >= max(bytes_step / bandwidth, flops_step / peak)
The run is replayed with continuous batching at a fixed concurrency: requests are admitted in order as
slots free up, each running request gains one token per step. The sum of t_step is the least time any
engine can take on this hardware (bandwidth and peak measured by verl_recipes.bench.ceilings); measured time over it
is the gap.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DecodeCost:
    weight_bytes: float  # W_read: bf16 weights read per step (non-embedding + lm_head; a tied embedding counts once)
    kv_bytes_per_token: float  # K and V of all layers, bf16
    flops_per_token: float  # 2 x the parameters that W_read covers
    attention_flops_per_context_token: float  # 4 n_h d L

    @classmethod
    def of(cls, config, bytes_per_element: int = 2) -> "DecodeCost":
        """From an HF config of a dense Qwen2/Llama-style model."""
        hidden, layers = config.hidden_size, config.num_hidden_layers
        head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
        q_size, kv_size = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
        per_layer = hidden * (q_size + 2 * kv_size) + q_size * hidden + 3 * hidden * config.intermediate_size
        params = layers * per_layer + config.vocab_size * hidden
        return cls(
            weight_bytes=bytes_per_element * params,
            kv_bytes_per_token=2 * layers * kv_size * bytes_per_element,
            flops_per_token=2 * params,
            attention_flops_per_context_token=4 * q_size * layers,
        )

    def step_seconds(self, running: int, prefill_tokens: float, total_context: float, bandwidth: float,
                     peak_flops: float) -> float:
        """Least time of one step: `running` sequences decode one token each over `total_context` tokens of KV
        cache, and `prefill_tokens` prompt tokens are admitted."""
        step_bytes = self.weight_bytes + self.kv_bytes_per_token * total_context
        step_flops = self.flops_per_token * (running + prefill_tokens) + self.attention_flops_per_context_token * total_context
        return max(step_bytes / bandwidth, step_flops / peak_flops)


def floor_seconds(prompts, responses, concurrency: int, cost: DecodeCost, bandwidth: float, peak_flops: float) -> float:
    """Least time to generate responses[i] tokens after prompts[i], at most `concurrency` requests in flight.

    bandwidth in bytes/s, peak_flops in FLOP/s."""
    if concurrency < 1 or len(prompts) != len(responses):
        raise ValueError(f"need concurrency >= 1 and as many prompts as responses; got {concurrency}, "
                         f"{len(prompts)} prompts, {len(responses)} responses")
    prompts, responses = np.asarray(prompts, dtype=np.int64), np.asarray(responses, dtype=np.int64)
    context = np.zeros(0, dtype=np.int64)
    remaining = np.zeros(0, dtype=np.int64)
    admitted, seconds = 0, 0.0
    while admitted < len(prompts) or context.size:
        new = slice(admitted, min(len(prompts), admitted + concurrency - context.size))
        admitted = new.stop
        context = np.concatenate([context, prompts[new]])
        remaining = np.concatenate([remaining, responses[new]])
        seconds += cost.step_seconds(context.size, prompts[new].sum(), float(context.sum()), bandwidth, peak_flops)
        context, remaining = context + 1, remaining - 1
        running = remaining > 0
        context, remaining = context[running], remaining[running]
    return seconds

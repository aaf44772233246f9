"""What replaces flash-attn in a verl worker, loaded at `import verl` through VERL_USE_EXTERNAL_MODULES (verl 0.9.1's
verl/__init__.py imports the modules it names), which configs/attention/{torch_varlen,sdpa_padded} set for every Ray
worker. It registers attn_implementation="torch_varlen" (verl_recipes.runtime.varlen_attention) and, when verl
would otherwise fall back to its per-token log-prob loop (no flash-attn cross-entropy), puts the chunked log-probs
of verl_recipes.runtime.logprobs in its place. With flash-attn installed the log-probs stay verl's. The entropy of
padded rows (sdpa_padded) is taken in chunks (verl_recipes.runtime.padded_entropy); packed rows keep verl's.
"""

from verl_recipes.runtime import (  # noqa: F401 - varlen_attention registers on import
    logprobs,
    padded_entropy,
    varlen_attention,
)

padded_entropy.use()

if not logprobs.flash_attn_cross_entropy_available():
    logprobs.use(True)

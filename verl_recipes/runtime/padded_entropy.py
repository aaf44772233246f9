"""The entropy of padded rows in chunks, as verl already takes it for packed ones.

verl 0.9.1's FSDP engine on padded rows (use_remove_padding=False: the sdpa_padded fallback of a vision-language
model without flash-attn) takes the entropy of the whole [rows, longest row, vocab] logits with the eager
`verl_F.entropy_from_logits` (workers/engine/fsdp/transformer_impl.py, prepare_model_outputs), whatever
fsdp_config.entropy_from_logits_with_chunking and use_torch_compile say. Eager, its softmax and log-sum-exp
temporaries come to about 12 B per position per vocabulary entry beside the logits' 2 B. The node run of
qwen25-vl-7b-geo3k-dapo (20 layers, 2 x H200, 2026-11-28, results/node/) peaked at 127.77 GiB in its first old-log-prob
pass and ran out of memory in its second, asking 36.54 GiB more (21 rows of 3,072 positions, 152,064 entries, 4 B).

`entropy_from_logits` here takes a no-grad input of more than two dimensions over its flattened positions with
verl's own `entropy_from_logits_with_chunking` (float32, CHUNK_POSITIONS at a time); any other call (packed rows,
or a graph the update differentiates) stays verl's. `use()` puts it in verl's torch_functional, where the engine
looks it up at each call; `verl_recipes.runtime.without_flash_attn` does that in every worker of a launch without
flash-attn.
"""

import torch

CHUNK_POSITIONS = 2048  # verl's own default entropy_from_logits_chunk_size
# verl's two functions, bound by use(): module globals and no import at call time, so that the engine's
# torch.compile of the packed rows' entropy (which binds this function once use() has run) traces straight through
_verl_entropy = None
_verl_chunked_entropy = None


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """verl's signature: the entropy of each distribution in logits [..., vocab], shaped [...]."""
    if logits.dim() <= 2 or (torch.is_grad_enabled() and logits.requires_grad):
        return _verl_entropy(logits)
    flat = _verl_chunked_entropy(logits.reshape(-1, logits.shape[-1]), CHUNK_POSITIONS)
    return flat.view(logits.shape[:-1])


def use() -> None:
    global _verl_entropy, _verl_chunked_entropy
    import verl.utils.torch_functional as verl_F

    _verl_entropy = verl_F._verl_entropy_from_logits = getattr(verl_F, "_verl_entropy_from_logits",
                                                               verl_F.entropy_from_logits)
    _verl_chunked_entropy = verl_F.entropy_from_logits_with_chunking
    verl_F.entropy_from_logits = entropy_from_logits


def in_use() -> bool:
    import verl.utils.torch_functional as verl_F

    return verl_F.entropy_from_logits is entropy_from_logits

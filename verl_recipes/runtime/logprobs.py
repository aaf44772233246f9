"""Token log-probabilities without flash-attn: chunked over tokens, one pass each way, no Python loop per token.

verl 0.9.1's `verl.utils.torch_functional.logprobs_from_logits` uses flash-attn's Triton cross-entropy when the
`flash_attn` package is installed; without it, it falls back to `logprobs_from_logits_v2`, which loops in Python
over the first dimension of the logits. With packed sequences (use_remove_padding=True) that dimension is the
token, so it pays one `log_softmax` launch per token (about 0.15 ms each on an H200, 38 s for a 252k-token
mini-batch of the 1.5B benchmark). This module computes the same numbers the way flash-attn's kernel does:
- forward: the log-sum-exp of each token's logits in float32, over chunks of tokens sized to 256 MiB of float32
  scratch, and the label's logit minus it;
- backward: d logp / d logits = onehot(label) - softmax(logits), chunk by chunk from the saved log-sum-exp,
  written into the logits' own storage when verl allows it (inplace_backward=True: it does when no entropy is
  computed from the same logits), so no second [tokens x vocab] tensor exists.
Results are float32, as flash-attn's are (verl's bf16 fallback returns bf16).

`use(True)` puts it in place of verl's function everywhere verl imported it (`use(False)` restores verl's);
`verl_recipes.runtime.without_flash_attn` does that at import when flash-attn's cross-entropy is absent.
"""

import sys

import torch

SCRATCH_BYTES = 2**28  # float32 scratch per chunk (tokens x vocab x 4 bytes): 441 tokens of a 152k vocabulary


def chunk_tokens(vocab_size: int) -> int:
    return max(1, SCRATCH_BYTES // (4 * vocab_size))


class ChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, inplace_backward):
        step = chunk_tokens(logits.shape[-1])
        lse = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for start in range(0, logits.shape[0], step):
            lse[start : start + step] = torch.logsumexp(logits[start : start + step].float(), dim=-1)
        picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1).float()
        ctx.save_for_backward(logits, labels, lse)
        ctx.inplace_backward = inplace_backward
        return picked - lse

    @staticmethod
    def backward(ctx, grad_output):
        logits, labels, lse = ctx.saved_tensors
        grad_logits = logits if ctx.inplace_backward else torch.empty_like(logits)
        step = chunk_tokens(logits.shape[-1])
        for start in range(0, logits.shape[0], step):
            rows = slice(start, start + step)
            scale = grad_output[rows].float().unsqueeze(-1)
            chunk = torch.exp(logits[rows].float() - lse[rows].unsqueeze(-1)).mul_(-scale)
            chunk.scatter_add_(-1, labels[rows].unsqueeze(-1), scale)
            grad_logits[rows] = chunk.to(logits.dtype)
        return grad_logits, None, None


def logprobs_from_logits(logits, labels, inplace_backward=True):
    """verl's signature: log p(label) for logits [..., vocab] and labels [...]; float32, shaped like labels."""
    vocab = logits.shape[-1]
    flat = ChunkedLogProbs.apply(logits.reshape(-1, vocab), labels.reshape(-1), bool(inplace_backward))
    return flat.view(labels.shape)


def _verl_original():
    import verl.utils.torch_functional as verl_F

    return getattr(verl_F, "_verl_logprobs_from_logits", verl_F.logprobs_from_logits)


def use(chunked: bool) -> None:
    """Point every loaded verl module's `logprobs_from_logits` at this module's (or back at verl's). Modules that
    import it later get whatever torch_functional holds then."""
    import verl.utils.torch_functional as verl_F

    original = _verl_original()
    verl_F._verl_logprobs_from_logits = original
    target = logprobs_from_logits if chunked else original
    for name, module in list(sys.modules.items()):
        in_verl = name.split(".")[0] == "verl"
        if in_verl and getattr(module, "logprobs_from_logits", None) in (original, logprobs_from_logits):
            module.logprobs_from_logits = target


def in_use() -> bool:
    import verl.utils.torch_functional as verl_F

    return verl_F.logprobs_from_logits is logprobs_from_logits


def flash_attn_cross_entropy_available() -> bool:
    """What verl 0.9.1 itself decides (verl/utils/torch_functional.py: the flash-attn CE import and its env switch)."""
    import os

    import verl.utils.torch_functional as verl_F

    return verl_F.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE and os.environ.get("VERL_DISABLE_FLASH_ATTN_CE", "0") != "1"

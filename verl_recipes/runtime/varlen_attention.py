"""PyTorch's own variable-length attention, registered in transformers as attn_implementation="torch_varlen".

verl's packed path (use_remove_padding=True) feeds the model ONE row of concatenated sequences whose
position_ids restart at 0 where each sequence starts, with attention_mask=None, and counts on flash-attn's
varlen kernel to keep the sequences apart. This module gives the same semantics without flash-attn
(configs/attention/torch_varlen loads it in every worker through verl_recipes.runtime.without_flash_attn):
  * no mask (packed row, or unpadded rows): sequences are cut where position_ids restart at 0;
  * a 2-D padding mask (verl's use_remove_padding=False path): the valid tokens of each row are gathered and
    attended as one sequence, as transformers' flash-attention path does.
No query attends to a pad token or to another sequence, and attention spends no FLOP on pad tokens.
On CUDA the kernel is torch.nn.attention.varlen.varlen_attn (PyTorch's flash kernel); on CPU, or on a torch
without it, causal SDPA runs once per sequence.

Causal only: it serves decoder language models. Vision towers attend bidirectionally, so VL models keep SDPA
(configs/attention/sdpa_padded). It registers itself on import.
"""

import inspect
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

NAME = "torch_varlen"

try:
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # torch < 2.9
    varlen_attn = None
use_varlen_kernel = varlen_attn is not None  # a caller whose check() fails on the kernel can turn it off
# varlen_attn's keywords changed between torch 2.9 (is_causal) and 2.12 (window_size, scale, enable_gqa)
VARLEN_KEYWORDS = set(inspect.signature(varlen_attn).parameters) if varlen_attn is not None else set()


@dataclass
class AttentionLog:
    """What reached attention in layer 0 (once per forward, and again per recompute): the proof that a packed
    run stayed packed."""

    calls: int = 0
    padded_calls: int = 0  # calls whose rows carried pad tokens (a 2-D mask)
    max_rows: int = 0  # largest batch dimension seen
    sequences: int = 0  # sequences attended, summed over calls
    tokens_in: int = 0  # rows x columns that reached attention, summed over calls
    tokens_attended: int = 0  # of those, tokens that belong to a sequence

    def reset(self):
        for field in fields(self):
            setattr(self, field.name, 0)


LOG = AttentionLog()


def backend(device: torch.device) -> str:
    """The kernel torch_varlen uses on this device."""
    if device.type == "cuda" and use_varlen_kernel:
        return "torch.nn.attention.varlen.varlen_attn"
    return "sdpa per sequence"


def segment_lengths(position_ids: torch.Tensor) -> torch.Tensor:
    """Lengths of the sequences in a flat run of position ids, cut where the position restarts at 0."""
    starts = torch.nonzero(position_ids == 0).flatten()
    if starts.numel() == 0 or starts[0].item() != 0:
        raise ValueError(
            f"{NAME}: position_ids must start every sequence at 0 (got first ids {position_ids[:8].tolist()})"
        )
    ends = torch.cat([starts[1:], starts.new_tensor([position_ids.numel()])])
    return ends - starts


@dataclass
class Layout:
    """Where the sequences are in the (rows x columns) tokens that reach attention."""

    rows: int
    columns: int
    keep: torch.Tensor | None  # flat indices of the tokens that belong to a sequence; None: all of them
    lengths: list[int]  # sequence lengths, in order
    cu_seqlens: torch.Tensor  # int32 offsets of the sequences in the kept tokens, on the tokens' device

    @classmethod
    def of(cls, attention_mask, position_ids, rows: int, columns: int) -> "Layout":
        if attention_mask is None:
            if position_ids is None:
                raise ValueError(f"{NAME}: without an attention mask the sequences come from position_ids; got none")
            keep, lengths = None, segment_lengths(position_ids.expand(rows, columns).reshape(-1))
        elif attention_mask.dim() != 2:
            raise ValueError(f"{NAME}: expected a 2-D padding mask, got shape {tuple(attention_mask.shape)}")
        else:
            keep, lengths = torch.nonzero(attention_mask.reshape(-1)).flatten(), attention_mask.sum(-1)
            lengths = lengths[lengths > 0]
        source = attention_mask if attention_mask is not None else position_ids
        cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(device=source.device, dtype=torch.int32)
        return cls(rows, columns, keep, lengths.tolist(), cu_seqlens)


# Every layer of one forward gets the same mask (or position ids) object: its layout is computed once and
# reused, since computing it copies to the host and so stalls the GPU. Identity, not value, is the key.
_last_layout: list = [None, None]  # [mask or position ids, Layout]


def layout_of(attention_mask, position_ids, rows: int, columns: int) -> Layout:
    source = attention_mask if attention_mask is not None else position_ids
    cached_source, cached = _last_layout
    if source is None or source is not cached_source or (cached.rows, cached.columns) != (rows, columns):
        _last_layout[:] = [source, Layout.of(attention_mask, position_ids, rows, columns)]
    return _last_layout[1]


def _varlen_cuda(query, key, value, cu_seqlens, max_len, scale):
    """torch's varlen_attn with whichever keywords this torch has."""
    kwargs = {"window_size": (-1, 0)} if "window_size" in VARLEN_KEYWORDS else {"is_causal": True}
    if "scale" in VARLEN_KEYWORDS:
        kwargs["scale"] = scale
    elif abs(scale - query.shape[-1] ** -0.5) > 1e-6:
        raise ValueError(f"{NAME}: this torch's varlen_attn takes no scale, and the model asks for {scale}")
    if "enable_gqa" in VARLEN_KEYWORDS:
        kwargs["enable_gqa"] = True
    elif key.shape[1] != query.shape[1]:  # older kernels check or mis-handle grouped KV heads: repeat them
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    return varlen_attn(query, key, value, cu_seqlens, cu_seqlens, max_len, max_len, **kwargs)


def _sdpa_per_sequence(query, key, value, lengths: list[int], scale):
    outputs = []
    for q, k, v in zip(query.split(lengths), key.split(lengths), value.split(lengths)):
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, scale=scale, enable_gqa=True
        )
        outputs.append(out.transpose(0, 1))
    return torch.cat(outputs)


def attend_packed(query, key, value, layout: Layout, scale: float) -> torch.Tensor:
    """Causal attention of packed (tokens, heads, head_dim) tensors, each sequence on its own."""
    if backend(query.device) == "sdpa per sequence":
        return _sdpa_per_sequence(query, key, value, layout.lengths, scale)
    return _varlen_cuda(query, key, value, layout.cu_seqlens, max(layout.lengths), scale)


def torch_varlen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention interface: query (B, Hq, S, D), key/value (B, Hkv, S, D) -> (B, S, Hq, D)."""
    if dropout:
        raise ValueError(f"{NAME}: attention dropout is not supported (got {dropout})")
    batch, heads, seq_len, head_dim = query.shape
    scale = head_dim**-0.5 if scaling is None else scaling
    layout = layout_of(attention_mask, kwargs.get("position_ids"), batch, seq_len)
    flat = [t.transpose(1, 2).reshape(batch * seq_len, t.shape[1], head_dim) for t in (query, key, value)]
    if layout.keep is not None:
        flat = [t[layout.keep] for t in flat]
    if getattr(module, "layer_idx", 0) == 0:
        LOG.calls += 1
        LOG.padded_calls += attention_mask is not None
        LOG.max_rows = max(LOG.max_rows, batch)
        LOG.sequences += len(layout.lengths)
        LOG.tokens_in += batch * seq_len
        LOG.tokens_attended += sum(layout.lengths)
    out = attend_packed(*flat, layout, scale)
    if layout.keep is not None:  # pad positions get zeros, as flash-attention's unpad/pad does
        out = out.new_zeros(batch * seq_len, heads, head_dim).index_copy(0, layout.keep, out)
    return out.view(batch, seq_len, heads, head_dim), None


def register() -> None:
    """Make attn_implementation="torch_varlen" valid; its masks are built like flash-attention's (2-D or None)."""
    AttentionInterface.register(NAME, torch_varlen_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"])


def check(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> float:
    """Relative error of torch_varlen (outputs and query grads) against float64 causal attention per sequence,
    on a packed batch with grouped KV heads. bf16 lands near 1e-2 or below; raises above 5e-2."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([5, 300, 1, 77, 1000])
    heads, kv_heads, head_dim = 6, 2, 64
    total = int(lengths.sum())
    tensors = [torch.randn(total, h, head_dim, generator=generator) for h in (heads, kv_heads, kv_heads)]
    position_ids = torch.cat([torch.arange(n) for n in lengths.tolist()]).unsqueeze(0)
    grad_out = torch.randn(total, heads, head_dim, generator=generator)

    inputs = [t.to(device, dtype).requires_grad_() for t in tensors]
    query, key, value = [t.transpose(0, 1).unsqueeze(0) for t in inputs]  # (1, H, T, D), as transformers passes
    out, _ = torch_varlen_attention(None, query, key, value, None, position_ids=position_ids.to(device))
    out[0].backward(grad_out.to(device, dtype))

    reference = [t.double().requires_grad_() for t in tensors]
    expected = _sdpa_per_sequence(*reference, lengths.tolist(), head_dim**-0.5)
    expected.backward(grad_out.double())
    error = max(
        ((out[0].double().cpu() - expected).norm() / expected.norm()).item(),
        ((inputs[0].grad.double().cpu() - reference[0].grad).norm() / reference[0].grad.norm()).item(),
    )
    if not error < 5e-2:
        raise AssertionError(f"{NAME} disagrees with reference attention on {device}: relative error {error:.3g}")
    return error


register()

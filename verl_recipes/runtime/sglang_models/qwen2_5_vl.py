"""SGLang 0.5.12's Qwen2.5-VL vision tower on the transformers 5.9.0 that verl 0.9.1 pins.

SGLang's vision tower (sglang/srt/models/qwen2_5_vl.py) takes transformers' Qwen2_5_VisionRotaryEmbedding and asks
it for the table of max_grid_size positions, `rotary_pos_emb(max_grid_size)`, as transformers 5.6.0 (SGLang's pin)
defines forward(seqlen). transformers 5.9.0 made it forward(position_ids), the frequencies of the positions given,
so SGLang's call multiplies one CUDA scalar with the buffer: every VL request of the tiny SGLang smoke died in its
first prefill with "Expected all tensors to be on the same device, ... cuda:0 and cpu" (1 x H200, 2026-12-01). The
buffer and its values are the same in both versions; only the call differs.

Under a transformers whose forward takes position ids, SGLang's tower gets a subclass that answers SGLang's call as
5.6.0 did: the table for positions 0 .. seqlen-1, which SGLang then indexes with its position ids. Under one that
still takes seqlen, SGLang's module is left alone.
"""

from __future__ import annotations

import inspect

import torch
from sglang.srt.models import qwen2_5_vl as sglang_qwen2_5_vl
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionRotaryEmbedding


class SeqlenVisionRotaryEmbedding(Qwen2_5_VisionRotaryEmbedding):
    """transformers' vision rotary embedding with the forward(seqlen) that SGLang 0.5.12 calls."""

    def forward(self, seqlen) -> torch.Tensor:
        positions = torch.arange(int(seqlen), device=self.inv_freq.device, dtype=self.inv_freq.dtype)
        return torch.outer(positions, self.inv_freq)


def takes_position_ids(rotary: type) -> bool:
    return "position_ids" in inspect.signature(rotary.forward).parameters


if takes_position_ids(sglang_qwen2_5_vl.Qwen2_5_VisionRotaryEmbedding):
    sglang_qwen2_5_vl.Qwen2_5_VisionRotaryEmbedding = SeqlenVisionRotaryEmbedding

EntryClass = sglang_qwen2_5_vl.EntryClass

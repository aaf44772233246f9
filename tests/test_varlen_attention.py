"""verl_recipes.runtime.varlen_attention: packed rows are cut into their sequences, padded rows lose their pads, and a real
transformers Qwen2 model run with attn_implementation="torch_varlen" on a packed row gives each sequence the
logits it gets alone."""

import pytest
import torch
from transformers import AutoConfig, Qwen2ForCausalLM

from verl_recipes.runtime import varlen_attention
from verl_recipes.smoke.tiny import MODELS


def random_qkv(total, heads=4, kv_heads=2, head_dim=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(1, h, total, head_dim, generator=generator) for h in (heads, kv_heads, kv_heads)]


def test_matches_float64_reference_on_cpu():
    assert varlen_attention.check(torch.device("cpu")) < 1e-2


@pytest.mark.parametrize(
    "position_ids, lengths",
    [
        ([0, 1, 2, 0, 1, 0], [3, 2, 1]),
        ([0, 1, 2, 3], [4]),
        ([0, 0, 0], [1, 1, 1]),
    ],
)
def test_segment_lengths_cut_where_positions_restart(position_ids, lengths):
    assert varlen_attention.segment_lengths(torch.tensor(position_ids)).tolist() == lengths


def test_segment_lengths_refuse_a_row_that_does_not_start_a_sequence():
    with pytest.raises(ValueError, match="start every sequence at 0"):
        varlen_attention.segment_lengths(torch.tensor([3, 4, 0, 1]))


def test_packed_row_equals_each_sequence_alone():
    lengths = [7, 1, 12]
    query, key, value = random_qkv(sum(lengths))
    position_ids = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    packed, _ = varlen_attention.torch_varlen_attention(None, query, key, value, None, position_ids=position_ids)
    start = 0
    for n in lengths:
        alone, _ = varlen_attention.torch_varlen_attention(
            None, *(t[:, :, start : start + n] for t in (query, key, value)), None, position_ids=torch.arange(n)[None]
        )
        torch.testing.assert_close(packed[:, start : start + n], alone)
        start += n


def test_padded_rows_equal_packed_row_and_zero_the_pads():
    lengths = [5, 9]
    query, key, value = random_qkv(sum(lengths), seed=1)
    position_ids = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    packed, _ = varlen_attention.torch_varlen_attention(None, query, key, value, None, position_ids=position_ids)

    width = max(lengths)
    mask = torch.zeros(len(lengths), width, dtype=torch.bool)
    padded = [torch.zeros(len(lengths), t.shape[1], width, t.shape[3]) for t in (query, key, value)]
    start = 0
    for row, n in enumerate(lengths):  # right-padded, as verl's use_remove_padding=False path builds its rows
        mask[row, :n] = True
        for full, part in zip(padded, (query, key, value)):
            full[row, :, :n] = part[0, :, start : start + n]
        start += n
    varlen_attention.LOG.reset()
    out, _ = varlen_attention.torch_varlen_attention(None, *padded, mask)
    torch.testing.assert_close(out[mask], packed[0])
    assert out[~mask].abs().max() == 0
    log = varlen_attention.LOG
    assert (log.padded_calls, log.max_rows, log.tokens_in, log.tokens_attended) == (1, 2, 2 * width, sum(lengths))


def test_refuses_dropout_and_missing_position_ids():
    query, key, value = random_qkv(4)
    with pytest.raises(ValueError, match="dropout"):
        varlen_attention.torch_varlen_attention(None, query, key, value, None, dropout=0.1)
    with pytest.raises(ValueError, match="position_ids"):
        varlen_attention.torch_varlen_attention(None, query, key, value, None)


def test_qwen2_with_torch_varlen_keeps_packed_sequences_apart(monkeypatch, tmp_path):
    config = AutoConfig.from_pretrained(MODELS["qwen2"](tmp_path))
    config._attn_implementation = varlen_attention.NAME
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(0)
    sequences = [torch.randint(3, config.vocab_size, (n,), generator=generator) for n in (6, 11, 3)]
    packed_ids = torch.cat(sequences).unsqueeze(0)
    position_ids = torch.cat([torch.arange(len(s)) for s in sequences]).unsqueeze(0)
    varlen_attention.LOG.reset()
    layouts = []
    layout_of = varlen_attention.Layout.of
    monkeypatch.setattr(varlen_attention.Layout, "of", lambda *args: layouts.append(args) or layout_of(*args))
    with torch.no_grad():
        packed = model(input_ids=packed_ids, position_ids=position_ids).logits[0]
        assert len(layouts) == 1  # worked out once per forward, not once per layer
        alone = torch.cat([model(input_ids=s.unsqueeze(0)).logits[0] for s in sequences])
    torch.testing.assert_close(packed, alone, rtol=1e-4, atol=1e-4)
    assert varlen_attention.LOG.padded_calls == 0 and varlen_attention.LOG.sequences == 2 * len(sequences)


@pytest.mark.parametrize(
    "keywords",
    [
        {"is_causal"},  # torch 2.9 / 2.10
        {"window_size", "scale"},  # torch 2.11
        {"window_size", "scale", "enable_gqa"},  # torch 2.12+
    ],
)
def test_varlen_kernel_call_adapts_to_the_torch_signature(monkeypatch, keywords):
    """The CUDA-only kernel is replaced by a stand-in that enforces the given torch's contract."""
    lengths = torch.tensor([3, 8, 1])

    def fake_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, **kwargs):
        assert set(kwargs) <= keywords
        assert kwargs.get("is_causal") or kwargs.get("window_size") == (-1, 0)
        assert cu_seq_q.dtype == torch.int32 and cu_seq_q.tolist() == [0, 3, 11, 12] and max_q == max_k == 8
        if "enable_gqa" not in kwargs:
            assert key.shape[1] == query.shape[1], "this torch needs the KV heads repeated"
        scale = kwargs.get("scale", query.shape[-1] ** -0.5)
        return varlen_attention._sdpa_per_sequence(query, key, value, lengths.tolist(), scale)

    monkeypatch.setattr(varlen_attention, "varlen_attn", fake_varlen_attn)
    monkeypatch.setattr(varlen_attention, "VARLEN_KEYWORDS", keywords)
    monkeypatch.setattr(varlen_attention, "backend", lambda device: "torch.nn.attention.varlen.varlen_attn")
    query, key, value = (t[0].transpose(0, 1).contiguous() for t in random_qkv(int(lengths.sum()), seed=2))
    layout = varlen_attention.Layout.of(None, torch.cat([torch.arange(n) for n in lengths.tolist()]), 1, 12)
    out = varlen_attention.attend_packed(query, key, value, layout, 16**-0.5)
    torch.testing.assert_close(out, varlen_attention._sdpa_per_sequence(query, key, value, [3, 8, 1], 16**-0.5))

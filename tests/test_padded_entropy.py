"""Padded rows' entropy in chunks: the numbers of verl's eager function, less memory at once, and only where verl's
engine would hold a no-grad [rows, positions, vocab] tensor's temporaries (verl_recipes/runtime/padded_entropy.py)."""

import pytest
import torch

from verl_recipes.runtime import padded_entropy


@pytest.fixture
def in_use():
    import verl.utils.torch_functional as verl_F

    original = verl_F.entropy_from_logits
    padded_entropy.use()
    yield verl_F
    verl_F.entropy_from_logits = original


def float64_entropy(logits: torch.Tensor) -> torch.Tensor:
    x = logits.double()
    return -(torch.softmax(x, -1) * torch.log_softmax(x, -1)).sum(-1)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_padded_rows_get_the_entropy_in_chunks(monkeypatch, in_use, dtype, tolerance):
    monkeypatch.setattr(padded_entropy, "CHUNK_POSITIONS", 7)  # several chunks, the last one short
    chunked = []
    original_chunking = padded_entropy._verl_chunked_entropy
    monkeypatch.setattr(padded_entropy, "_verl_chunked_entropy",
                        lambda logits, chunk_size: chunked.append(chunk_size) or original_chunking(logits, chunk_size))
    logits = (torch.randn(3, 11, 500, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    with torch.no_grad():
        entropy = in_use.entropy_from_logits(logits)  # how verl's engine calls it on padded rows
    assert chunked == [7] and entropy.shape == (3, 11)
    torch.testing.assert_close(entropy.double(), float64_entropy(logits), atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(entropy.to(dtype).float(), in_use._verl_entropy_from_logits(logits).float(),
                               atol=tolerance * 4, rtol=tolerance)


def test_packed_rows_and_a_graph_to_differentiate_stay_verls(monkeypatch, in_use):
    monkeypatch.setattr(padded_entropy, "_verl_chunked_entropy", lambda *a: pytest.fail("chunked"))
    packed = torch.randn(13, 50)
    torch.testing.assert_close(in_use.entropy_from_logits(packed), in_use._verl_entropy_from_logits(packed))
    padded = torch.randn(2, 5, 50, requires_grad=True)
    entropy = in_use.entropy_from_logits(padded)
    entropy.sum().backward()  # the update's entropy bonus keeps its gradient
    assert padded.grad is not None and padded.grad.abs().sum() > 0


def test_use_is_idempotent_and_keeps_verls_function(in_use):
    original = in_use._verl_entropy_from_logits
    padded_entropy.use()
    assert padded_entropy.in_use() and in_use._verl_entropy_from_logits is original
    assert original.__module__ == "verl.utils.torch_functional"


def test_the_engines_compiled_entropy_of_packed_rows_traces_through(in_use):
    """verl's engine binds torch.compile(verl_F.entropy_from_logits) at start-up, after the hook ran: packed rows
    must compile to one graph, as verl's own function does (a graph break would hold its eager temporaries)."""
    explained = torch._dynamo.explain(padded_entropy.entropy_from_logits)(torch.randn(9, 40))
    assert explained.graph_break_count == 0, explained.break_reasons

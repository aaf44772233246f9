"""The tool-call teaching's forward (verl_recipes/smoke/teach.py) runs the opening its rows share once: the hidden
states and every gradient are those of the whole rows run one by one in a batch, and a batch without a common opening,
or with images, runs whole."""

import torch

from verl_recipes.smoke import teach, tiny


def _batch(opening: int, rest: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded rows that start with the same `opening` tokens, then `rest[i]` tokens of their own."""
    gen = torch.Generator().manual_seed(0)
    common = torch.randint(3, 200, (opening,), generator=gen)
    ids = torch.zeros(len(rest), opening + max(rest), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(rest):
        ids[i, :opening + n] = torch.cat([common, torch.randint(3, 200, (n,), generator=gen)])
        mask[i, :opening + n] = 1
    return ids, mask


def _forward_and_grads(model, forward, mask):
    model.zero_grad()
    hidden = forward()
    (model.lm_head(hidden).pow(2) * mask[..., None]).mean().backward()
    return hidden.detach()[mask.bool()], {name: p.grad.clone() for name, p in model.named_parameters()}


def test_the_shared_opening_gives_the_whole_rows_hidden_states_and_gradients(tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny.MODELS["qwen2"](tmp_path / "m"), dtype=torch.float32).train()
    ids, mask = _batch(40, [12, 30, 5, 21])
    assert teach.shared_length(ids, mask) == 40
    whole = _forward_and_grads(model, lambda: model.model(input_ids=ids, attention_mask=mask).last_hidden_state, mask)
    shared = _forward_and_grads(model, lambda: teach._hidden(model, ids, mask, {}), mask)
    torch.testing.assert_close(shared[0], whole[0], rtol=1e-4, atol=1e-5)
    for name, grad in whole[1].items():
        torch.testing.assert_close(shared[1][name], grad, rtol=1e-3, atol=1e-6, msg=name)


def test_the_shared_opening_stops_short_of_each_rows_last_token_and_is_empty_without_one():
    ids, mask = _batch(10, [0, 4])
    assert teach.shared_length(ids, mask) == 9  # the shortest row keeps one token to run with the rest
    ids[1, 0] += 1
    assert teach.shared_length(ids, mask) == 0

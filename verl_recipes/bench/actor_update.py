"""Actor update: verl 0.9.1's defaults vs our batching and log-prob settings, factor by factor, against the GEMM roof.

One long-tail GRPO mini-batch (verl_recipes.bench.lengths) goes through verl's own actor (verl_recipes.bench.verl_actor:
TrainingWorker, FSDP2 engine, ppo_loss, AdamW) on a random-init model of Qwen2.5-1.5B's shape (or 7B's, --shape), in the
arms of ARMS: batching (fixed micro-batches of 2 sequences, or dynamic micro-batches filled to a token budget of
8 x (max prompt + max response), configs/batching/packed_dynamic) x log-prob path (verl's logprobs_from_logits,
which without flash-attn is a per-token Python loop; our chunked one, verl_recipes/runtime/logprobs.py; verl's fused
kernels, configs/kernels/fused), plus a padded arm (use_remove_padding=False), and a roofline proxy: fwd+bwd of ONE
packed micro-batch filled to the token budget, no optimizer step. Attention is verl_recipes.runtime.varlen_attention
in every arm; the packed arms are checked to have reached attention as one unpadded row per micro-batch, and each
arm's log-prob function is recorded from verl's engine module.

Each arm: one warm-up step (its loss must agree across arms: same weights, same data), then --steps timed
steps while the time budget lasts; with --profile, one more step under verl's torch profiler as our preset
configs/profiling/torch_rollout sets it, summarized by phase (verl_recipes.perf.torch_trace: GPU busy and idle time,
GPU time in forward, log-prob, backward and the optimizer).
Reports valid tokens/s, verl's MFU (its own metric: FlopsCounter on the valid lengths over its train_batch timer, the
device's datasheet peak), the fraction of the measured GEMM roof, peak memory, computed/valid tokens and
micro-batches; prints the tables last; writes $OUT/actor_update.json with the conditions every ratio depends on.

    python -m verl_recipes.bench.actor_update                 # on the GPU machine (kit on PYTHONPATH)
    python -m verl_recipes.bench.actor_update --cpu-dry-run   # tiny model on the CPU, same code path, ~1 minute

Under torchrun (one host) the same benchmark runs on every rank, as the actor's Ray workers of an N-GPU run do: verl's
FSDP2 engine shards weights, gradients and AdamW states over the ranks, each rank trains on its share of the
mini-batch (the trainer's balance_batch, then verl's dispatch split), verl's MFU is per GPU, and rank 0 alone
writes the JSON and prints the tables:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m verl_recipes.bench.actor_update ...
"""

import argparse
import gc
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from verl_recipes.bench import ceilings, lengths, model_shape, report, verl_actor
from verl_recipes.perf import torch_trace
from verl_recipes.runtime import logprobs, varlen_attention


@dataclass(frozen=True)
class Arm:
    """One cell of the factor grid: how micro-batches are formed, where log-probs come from, packed or padded."""

    batching: str  # "fixed": micro-batches of --micro-batch-size sequences; "dynamic": filled to the token budget
    logprobs: str  # "verl": verl 0.9.1's logprobs_from_logits (without flash-attn: its per-token loop);
    # "chunked": verl_recipes.runtime.logprobs; "fused": use_fused_kernels (no [tokens x vocab] logits)
    packed: bool = True


ARMS = {  # run in this order
    "padded": Arm("fixed", "verl", packed=False),  # use_remove_padding=False
    "verl_default": Arm("fixed", "verl"),  # verl 0.9.1's defaults
    "fixed_chunked": Arm("fixed", "chunked"),
    "fixed_fused": Arm("fixed", "fused"),
    "dynamic": Arm("dynamic", "verl"),
    "dynamic_chunked": Arm("dynamic", "chunked"),  # ours where fused kernels cannot run (the VL recipes)
    "ours": Arm("dynamic", "fused"),  # configs/batching/packed_dynamic + configs/kernels/fused
}
PROFILE_FRAGMENT = "configs/profiling/torch_rollout"  # verl's torch profiler: CPU + CUDA, one trace per stage call
LOGPROB_RANGE = "logprobs_from_logits"  # the bench names verl's log-prob call in the trace (verl does not)
PHASES = [  # (phase, range-name prefix), first match wins: where each kernel was launched from
    ("optimizer", "Optimizer.step"),  # torch.optim's own annotation
    ("backward", "autograd::engine::evaluate_function"),  # every backward node, on autograd's thread
    ("log-prob", LOGPROB_RANGE),  # forward of the log-probs from the logits (inside the model when fused)
    ("forward", "micro_batch"),  # verl's per-micro-batch range: the model's forward and the loss
]
GOALS = {  # name: (numerator, denominator, target)
    "ours / verl_default, valid tokens/s": ("ours", "verl_default", 1.5),
    "ours / padded, valid tokens/s": ("ours", "padded", 2.5),
    "ours MFU / packed-roofline proxy MFU": ("ours", "proxy", 0.85),
    "dynamic_chunked / ours (no fused kernels, no flash-attn), valid tokens/s": ("dynamic_chunked", "ours", 0.9),
}


def arm_overrides(arm: str, num_seqs: int, micro_batch_size: int, token_budget: int) -> list[str]:
    """verl 0.9.1 keys, as a recipe would set them (chunked log-probs are installed in-process, not by a key)."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {tuple(ARMS)}, got {arm!r}")
    settings = ARMS[arm]
    overrides = [
        "+actor_rollout_ref.model.override_config.attn_implementation=" + varlen_attention.NAME,
        "actor_rollout_ref.actor.strategy=fsdp2",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={num_seqs}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_batch_size}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro_batch_size}",
        f"actor_rollout_ref.model.use_remove_padding={settings.packed}",
        f"actor_rollout_ref.model.use_fused_kernels={settings.logprobs == 'fused'}",
    ]
    if settings.batching == "fixed":
        return overrides + ["actor_rollout_ref.actor.use_dynamic_bsz=False"]
    return overrides + [
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={token_budget}",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={2 * token_budget}",
    ]


def factor_table(arms: dict) -> dict:
    """valid tokens/s by batching (rows) and log-prob path (columns), for the packed arms that ran."""
    table = {}
    for name, arm in arms.items():
        settings = ARMS[name]
        if settings.packed:
            table.setdefault(settings.batching, {})[settings.logprobs] = arm["tokens_per_s"]
    return table


class TokenCounter:
    """Counts what enters the model: one embedding call per micro-batch, rows x columns tokens each."""

    def __init__(self, model):
        self.micro_batches = 0
        self.tokens = 0
        self.handle = model.get_input_embeddings().register_forward_pre_hook(self._count)

    def _count(self, module, args):
        self.micro_batches += 1
        self.tokens += args[0].numel()


def sync(on_gpu: bool) -> None:
    if on_gpu:
        torch.cuda.synchronize()


def packed_run_stayed_packed() -> bool:
    log = varlen_attention.LOG
    return log.calls > 0 and log.padded_calls == 0 and log.max_rows == 1 and log.tokens_in == log.tokens_attended


def across_ranks(values: list[float], op=torch.distributed.ReduceOp.SUM) -> list[float]:
    """values reduced over all ranks (unchanged on one); CPU tensors, so they go over gloo on the GPU too."""
    tensor = torch.tensor(values, dtype=torch.float64)
    torch.distributed.all_reduce(tensor, op=op)
    return tensor.tolist()


def timed_step(worker, batch_lengths, vocab_size, on_gpu, rank, world_size) -> dict:
    """One verl update_actor mini-batch, this rank's share of it; what verl reports plus what entered the model and
    attention on all ranks. The step lasts as long as its slowest rank."""
    data = verl_actor.ppo_mini_batch(batch_lengths.prompts, batch_lengths.responses, vocab_size, rank=rank,
                                     world_size=world_size)
    counter = TokenCounter(worker.engine.module)
    varlen_attention.LOG.reset()
    sync(on_gpu)
    start = time.perf_counter()
    output = worker.train_mini_batch(data)
    sync(on_gpu)
    seconds = time.perf_counter() - start
    counter.handle.remove()
    metrics = output["metrics"]  # loss and grad_norm are verl's, over all ranks; its mfu divides by the world size
    (seconds,) = across_ranks([seconds], torch.distributed.ReduceOp.MAX)
    (stayed_packed,) = across_ranks([packed_run_stayed_packed()], torch.distributed.ReduceOp.MIN)
    micro_batches, tokens, padded_calls = across_ranks(
        [counter.micro_batches, counter.tokens, varlen_attention.LOG.padded_calls]
    )
    return {
        "seconds": seconds,
        "verl_mfu": float(np.mean(metrics["mfu"])),
        "loss": float(np.mean(metrics["loss"])),
        "grad_norm": float(np.mean(metrics["grad_norm"])),
        "micro_batches": int(micro_batches),
        "computed_tokens": int(tokens),
        "stayed_packed": bool(stayed_packed),
        "padded_attention_calls": int(padded_calls),
    }


def run_proxy(worker, batch_lengths, vocab_size, repeats, on_gpu, world_size) -> dict:
    """fwd+bwd of one packed micro-batch at the token budget through the same engine, no optimizer or dispatch; on
    several ranks each rank runs such a micro-batch, so tokens and MFU are per GPU and tokens/s over all GPUs."""
    from verl.utils import tensordict_utils as tu

    data = verl_actor.ppo_mini_batch(batch_lengths.prompts, batch_lengths.responses, vocab_size, seed=1)
    tokens = int(batch_lengths.totals.sum())
    tu.assign_non_tensor(
        data,
        use_remove_padding=True,
        use_dynamic_bsz=True,
        max_token_len_per_gpu=tokens,
        micro_batch_size_per_gpu=len(batch_lengths.prompts),
        use_fused_kernels=worker.engine_config.use_fused_kernels,
    )
    engine = worker.engine
    times = []
    with engine.train_mode():
        for _ in range(repeats + 1):  # the first is warm-up
            varlen_attention.LOG.reset()
            sync(on_gpu)
            start = time.perf_counter()
            engine.forward_backward_batch(data, loss_function=worker.loss_fn)
            sync(on_gpu)
            times.append(time.perf_counter() - start)
            engine.optimizer_zero_grad()
    (seconds,) = across_ranks([float(np.median(times[1:]))], torch.distributed.ReduceOp.MAX)
    (stayed_packed,) = across_ranks([packed_run_stayed_packed()], torch.distributed.ReduceOp.MIN)
    achieved_tflops, peak_tflops = worker.flops_counter.estimate_flops(batch_lengths.totals.tolist(), seconds)
    return {
        "tokens": tokens,
        "sequences": len(batch_lengths.prompts),
        "seconds": seconds,
        "tokens_per_s": world_size * tokens / seconds,
        "achieved_tflops": achieved_tflops,
        "verl_mfu": achieved_tflops / peak_tflops,
        "stayed_packed": bool(stayed_packed),
    }


def proxy_lengths(token_budget: int, max_response: int, min_prompt: int, max_prompt: int, median: float):
    """Sequences from the same distribution, the last one cut so that they fill the budget exactly."""
    pool = lengths.sample(token_budget // min_prompt + 1, max_response, min_prompt, max_prompt, median, seed=1)
    count = int(np.searchsorted(np.cumsum(pool.totals), token_budget)) + 1
    prompts, responses = pool.prompts[:count].copy(), pool.responses[:count].copy()
    remaining = token_budget - int(pool.totals[: count - 1].sum())  # room left for the last sequence, >= 1
    if remaining == 1:  # one token: give it to the previous response
        prompts, responses = prompts[:-1], responses[:-1]
        responses[-1] += 1
    else:
        prompts[-1] = min(prompts[-1], remaining - 1)
        responses[-1] = remaining - prompts[-1]
    return lengths.Lengths(prompts=prompts, responses=responses)


def profiled_step(worker, batch_lengths, vocab_size, on_gpu, trace_dir: str, rank, world_size) -> dict | None:
    """One more step with verl's profiler on (its update stage, train_batch, is one trace in discrete mode) and
    verl's log-prob call wrapped in a named range; returns the trace's summary by phase, on rank 0 (the preset
    profiles rank 0 only; the other ranks run the step and return None)."""
    from verl.workers.engine.fsdp import transformer_impl

    function = transformer_impl.logprobs_from_logits

    def named(*args, **kwargs):
        with torch.profiler.record_function(LOGPROB_RANGE):
            return function(*args, **kwargs)

    transformer_impl.logprobs_from_logits = named
    try:
        worker.start_profile(profile_step=1)
        step = timed_step(worker, batch_lengths, vocab_size, on_gpu, rank, world_size)
        worker.stop_profile()
    finally:
        transformer_impl.logprobs_from_logits = function
    if rank != 0:
        return None
    traces = sorted(Path(trace_dir).glob("*.json*"))
    if len(traces) != 1:
        raise RuntimeError(f"expected one trace from the profiled step in {trace_dir}, found {[t.name for t in traces]}")
    summary = torch_trace.summarize(traces[0], PHASES, window="train_batch")
    return {"step_seconds": step["seconds"], "trace_mib": traces[0].stat().st_size / 2**20, **summary.as_dict()}


def run_arm(arm, args, model_path, batch_lengths, vocab_size, started, on_gpu) -> tuple[dict, object]:
    """Build the arm's actor from the saved weights, warm it up, time it; returns its result and its worker."""
    if on_gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    memory_before = torch.cuda.memory_allocated() / 2**30 if on_gpu else None
    overrides = arm_overrides(arm, args.num_seqs, args.micro_batch_size, args.token_budget)
    if args.optimizer_offload:  # a per-tensor Adam step: foreach's full-size temporaries do not fit a 7B on 141 GB
        overrides += ["actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
                      "actor_rollout_ref.actor.optim.override_optimizer_config={foreach:false}"]
    trace_dir = os.path.join(args.trace_dir, arm)
    if args.profile:
        overrides += [f"global_profiler.save_path={trace_dir}"]
    logprobs.use(ARMS[arm].logprobs == "chunked")
    build_start = time.perf_counter()
    fragments = (PROFILE_FRAGMENT,) if args.profile else ()
    worker = verl_actor.build_worker(verl_actor.compose(model_path, overrides, fragments))
    build_seconds = time.perf_counter() - build_start
    ranks = args.rank, args.world_size
    warmup = timed_step(worker, batch_lengths, vocab_size, on_gpu, *ranks)
    steps = [timed_step(worker, batch_lengths, vocab_size, on_gpu, *ranks)]
    while len(steps) < args.steps and time.perf_counter() - started < args.time_budget_s:
        steps.append(timed_step(worker, batch_lengths, vocab_size, on_gpu, *ranks))

    seconds = [step["seconds"] for step in steps]
    valid_tokens = int(batch_lengths.totals.sum())
    median_seconds = float(np.median(seconds))
    achieved_tflops, _ = worker.flops_counter.estimate_flops(batch_lengths.totals.tolist(), median_seconds)
    peak_memory = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else 0.0
    (peak_memory,) = across_ranks([peak_memory], torch.distributed.ReduceOp.MAX)
    result = {
        "overrides": overrides,
        "build_seconds": round(build_seconds, 1),
        "warmup_seconds": warmup["seconds"],
        "warmup_loss": warmup["loss"],
        "seconds": median_seconds,
        "step_seconds": seconds,
        "step_seconds_spread": (max(seconds) - min(seconds)) / median_seconds,
        "tokens_per_s": valid_tokens / median_seconds,
        "verl_mfu": float(np.median([step["verl_mfu"] for step in steps])),
        "achieved_tflops": achieved_tflops / args.world_size,  # per GPU, as verl's MFU
        "peak_memory_gib": peak_memory if on_gpu else None,  # the fullest GPU
        "memory_before_gib": memory_before,
        "micro_batches": steps[0]["micro_batches"],
        "computed_tokens": steps[0]["computed_tokens"],
        "computed_over_valid": steps[0]["computed_tokens"] / valid_tokens,
        "stayed_packed": all(step["stayed_packed"] for step in steps),
        "padded_attention_calls": steps[0]["padded_attention_calls"],
        "grad_norm": steps[0]["grad_norm"],
        "logprob_function": verl_logprob_function(),
        "data_parallel_size": worker.engine.get_data_parallel_size(),  # what verl's FSDP2 engine shards over
    }
    if args.profile:
        result["profile"] = profiled_step(worker, batch_lengths, vocab_size, on_gpu, trace_dir, *ranks)
    return result, worker


def varlen_attention_module_found(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None


def verl_logprob_function() -> str:
    """The log-prob function verl's FSDP engine calls when kernels are not fused: proof of which path an arm ran."""
    from verl.workers.engine.fsdp import transformer_impl

    function = transformer_impl.logprobs_from_logits
    return f"{function.__module__}.{function.__name__}"


def release_arm(original_forward, on_gpu: bool) -> None:
    """After the arm's worker is dropped: free its memory and undo use_fused_kernels' patch of the model class."""
    from transformers import Qwen2ForCausalLM

    Qwen2ForCausalLM.forward = original_forward
    logprobs.use(False)
    gc.collect()
    if on_gpu:
        torch.cuda.empty_cache()


def goals(arms: dict, proxy: dict) -> dict:
    values = {name: arm["tokens_per_s"] for name, arm in arms.items()}
    mfus = {name: arm["verl_mfu"] for name, arm in arms.items()}
    results = {}
    for goal, (numerator, denominator, target) in GOALS.items():
        if numerator not in arms or (denominator not in arms and denominator != "proxy"):
            continue
        if denominator == "proxy":
            value = mfus[numerator] / proxy["verl_mfu"] if proxy else None
        else:
            value = values[numerator] / values[denominator]
        results[goal] = {"value": value, "target": target, "held": bool(value is not None and value >= target)}
    return results


def checks(arms: dict, proxy: dict | None) -> dict:
    """Correctness guards: every arm computes the same loss on the same first step; packed arms stay packed."""
    losses = [arm["warmup_loss"] for arm in arms.values()]
    spread = float((max(losses) - min(losses)) / max(abs(np.mean(losses)), 1e-12))
    packed = [name for name in arms if ARMS[name].packed]
    return {
        "warmup_loss_relative_spread": spread,
        "losses_agree": bool(spread < 2e-2),
        "packed_arms_stayed_packed": all(arms[name]["stayed_packed"] for name in packed)
        and (proxy is None or proxy["stayed_packed"]),
        "padded_arm_saw_padding": arms["padded"]["padded_attention_calls"] > 0 if "padded" in arms else None,
        "chunked_arms_ran_chunked": all((arm["logprob_function"] == CHUNKED) == (ARMS[name].logprobs == "chunked")
                                        for name, arm in arms.items()),
    }


CHUNKED = f"{logprobs.__name__}.logprobs_from_logits"


def print_tables(payload: dict) -> None:
    rows = [dict(arm=name, **arm) for name, arm in payload["arms"].items()]
    if payload["proxy"]:
        rows.append(dict(arm="proxy (1 micro-batch)", micro_batches=1, computed_over_valid=1.0, **payload["proxy"]))
    gemm = payload["ceilings"]["gemm_tflops"]
    for row in rows:
        row["gemm_roof"] = row["achieved_tflops"] / gemm if gemm else None
    print(f"\nactor update on {payload['conditions']['world_size']} x {payload['hardware']}, {payload['model']['shape']}, "
          f"lengths {payload['lengths']}")
    settings = payload["settings"]
    print(
        f"token budget {settings['token_budget']}, micro-batch size {settings['micro_batch_size']}, "
        f"GEMM roof {gemm} TFLOP/s, attention {payload['attention']['backend']}; checks {payload['checks']}"
    )
    columns = [
        ("arm", "arm"),
        ("tokens_per_s", "valid tok/s"),
        ("verl_mfu", "verl MFU"),
        ("gemm_roof", "of GEMM roof"),
        ("peak_memory_gib", "peak GiB"),
        ("computed_over_valid", "computed/valid"),
        ("micro_batches", "micro-batches"),
        ("seconds", "step s"),
    ]
    print(report.table(rows, columns))
    factors = payload["factors"]
    paths = ("verl", "chunked", "fused")
    print(f"valid tok/s by batching x log-prob path (verl = {payload['conditions']['verl_logprobs']}):")
    print(report.table([{"batching": b, **factors[b]} for b in factors], [("batching", "batching")] + [(p, p) for p in paths]))
    if any("profile" in arm for arm in payload["arms"].values()):
        print(f"one profiled step per arm ({PROFILE_FRAGMENT}), GPU seconds by where the kernel was launched:")
        print(report.table(profile_rows(payload["arms"]), PROFILE_COLUMNS))
    goal_rows = [dict(goal=name, **goal) for name, goal in payload["goals"].items()]
    print(report.table(goal_rows, [("goal", "goal"), ("value", "value"), ("target", "target"), ("held", "held")]))


PROFILE_COLUMNS = [("arm", "arm"), ("wall_s", "train_batch s"), ("busy_fraction", "GPU busy"), ("idle_s", "GPU idle s")]
PROFILE_COLUMNS += [(phase, f"{phase} GPU s") for phase, _ in PHASES] + [("other", "other GPU s")]
PROFILE_COLUMNS += [("gpu_events", "GPU events"), ("logprob_range_s", "log-prob range s")]


def profile_rows(arms: dict) -> list[dict]:
    rows = []
    for name, arm in arms.items():
        if "profile" in arm:
            profile = arm["profile"]
            phases = {phase: values["gpu_s"] for phase, values in profile["phases"].items()}
            logprob_range_s = profile["phases"]["log-prob"]["range_s"]
            rows.append(dict(arm=name, logprob_range_s=logprob_range_s, **phases, **profile))
    return rows


def checked_attention(device: torch.device) -> dict:
    """torch_varlen against float64 attention before any arm runs; if torch's varlen kernel fails the check,
    the run goes on with SDPA per sequence (still unpadded, slower) and the report says so."""
    result = {"attn_implementation": varlen_attention.NAME, "varlen_kernel_failure": None}
    try:
        result["check_relative_error"] = varlen_attention.check(device)
    except Exception as failure:  # noqa: BLE001 - any failure of the kernel means: do not use it
        if varlen_attention.backend(device) == "sdpa per sequence":
            raise
        print(f"torch varlen_attn failed its check ({failure!r}); using SDPA per sequence", flush=True)
        varlen_attention.use_varlen_kernel = False
        result["varlen_kernel_failure"] = repr(failure)
        result["check_relative_error"] = varlen_attention.check(device)
    result["backend"] = varlen_attention.backend(device)
    varlen_attention.LOG.reset()
    return result


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-dry-run", action="store_true", help="tiny model on the CPU (gloo), same code path")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {ARMS}")
    parser.add_argument("--num-seqs", type=int, help="sequences in the mini-batch (default 128; dry run 4)")
    parser.add_argument("--max-response", type=int, help="response clip (default 4096; dry run 32)")
    parser.add_argument("--micro-batch-size", type=int, default=2, help="fixed micro-batch of the padded/default arms")
    parser.add_argument("--budget-multiple", type=int, default=8, help="token budget = N x (max prompt + response)")
    parser.add_argument("--steps", type=int, help="timed steps per arm after one warm-up step (default 2; dry run 1)")
    parser.add_argument("--proxy-repeats", type=int, help="timed proxy runs after one warm-up (default 3; dry run 1)")
    parser.add_argument("--time-budget-s", type=float, default=270, help="no extra timed steps after this")
    parser.add_argument("--shape", choices=list(model_shape.SHAPES), default="qwen2.5-1.5b",
                        help="model shape on the GPU (the dry run is always tiny)")
    parser.add_argument("--optimizer-offload", action="store_true",
                        help="Adam states on the CPU between steps and a per-tensor (not foreach) step: 7B on one GPU")
    parser.add_argument("--profile", action="store_true",
                        help=f"one more step per arm under verl's torch profiler ({PROFILE_FRAGMENT}), summarized by phase")
    args = parser.parse_args(argv)
    args.arms = [arm.strip() for arm in args.arms.split(",") if arm.strip()]
    unknown = sorted(set(args.arms) - set(ARMS))
    if unknown:
        parser.error(f"--arms: unknown {unknown}; choose from {ARMS}")
    dry = args.cpu_dry_run
    args.shape = "tiny" if dry else args.shape
    args.num_seqs = args.num_seqs or (4 if dry else 128)
    args.steps = args.steps or (1 if dry else 2)
    args.proxy_repeats = args.proxy_repeats or (1 if dry else 3)
    args.max_response = args.max_response or (32 if dry else 4096)
    args.min_prompt, args.max_prompt, args.median = (4, 16, 12) if dry else (100, 600, lengths.RESPONSE_MEDIAN)
    args.token_budget = args.budget_multiple * (args.max_prompt + args.max_response)
    if args.num_seqs % args.micro_batch_size:
        parser.error(f"--num-seqs {args.num_seqs} must be a multiple of --micro-batch-size {args.micro_batch_size}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    on_gpu = not args.cpu_dry_run
    if on_gpu and not torch.cuda.is_available():
        print("FAIL: no CUDA device; use --cpu-dry-run on a CPU machine", flush=True)
        return 1
    args.rank, args.world_size = verl_actor.init_ranks(cpu=args.cpu_dry_run)
    if args.num_seqs % (args.world_size * args.micro_batch_size):
        print(f"FAIL: --num-seqs {args.num_seqs} must be a multiple of {args.world_size} ranks x --micro-batch-size "
              f"{args.micro_batch_size}", flush=True)
        return 2
    device = torch.device("cuda" if on_gpu else "cpu")
    payload = report.environment(args.cpu_dry_run)
    payload["ceilings"] = ceilings.measure(cpu_dry_run=args.cpu_dry_run)
    payload["attention"] = checked_attention(device)
    batch_lengths = lengths.sample(
        args.num_seqs, args.max_response, args.min_prompt, args.max_prompt, args.median, seed=0
    )
    payload["lengths"] = batch_lengths.summary()
    payload["conditions"] = {  # every ratio depends on these
        "flash_attn_installed": varlen_attention_module_found("flash_attn"),
        "verl_logprobs": "flash-attn cross-entropy" if logprobs.flash_attn_cross_entropy_available()
        else "verl's per-token fallback loop (logprobs_from_logits_v2), flash-attn absent",
        "attention": "torch_varlen in every arm",
        "optimizer_offload": args.optimizer_offload,
        "world_size": args.world_size,  # ranks (GPUs) the mini-batch and FSDP2's shards are spread over
    }
    payload["settings"] = {
        "num_seqs": args.num_seqs,
        "max_prompt": args.max_prompt,
        "max_response": args.max_response,
        "micro_batch_size": args.micro_batch_size,
        "token_budget": args.token_budget,
        "steps": args.steps,
        "strategy": "fsdp2",
        "gradient_checkpointing": True,
        "profile": PROFILE_FRAGMENT if args.profile else None,
        "balance_batch": args.world_size > 1,  # verl's trainer.balance_batch splits the mini-batch over the ranks
    }
    from transformers import AutoConfig, Qwen2ForCausalLM

    original_forward = Qwen2ForCausalLM.forward
    arms, proxy = {}, None
    with tempfile.TemporaryDirectory() as own_path, tempfile.TemporaryDirectory() as args.trace_dir:
        if args.rank == 0:
            model_shape.write(args.shape, own_path, weights=True)
        model_path = [own_path]
        torch.distributed.broadcast_object_list(model_path, src=0)  # one host: every rank reads rank 0's folder
        config = AutoConfig.from_pretrained(model_path[0])
        vocab_size, payload["model"] = config.vocab_size, model_shape.summary(args.shape, config)
        for arm in args.arms:
            if args.rank == 0:
                print(f"== arm {arm} ({time.perf_counter() - started:.0f}s)", flush=True)
            arms[arm], worker = run_arm(arm, args, model_path[0], batch_lengths, vocab_size, started, on_gpu)
            if arm == "ours":
                budget_lengths = proxy_lengths(
                    args.token_budget, args.max_response, args.min_prompt, args.max_prompt, args.median
                )
                proxy = run_proxy(worker, budget_lengths, vocab_size, args.proxy_repeats, on_gpu, args.world_size)
            del worker
            release_arm(original_forward, on_gpu)
        torch.distributed.barrier()  # rank 0's model folder stays until every rank is done with it
    payload.update(arms=arms, proxy=proxy, goals=goals(arms, proxy), checks=checks(arms, proxy), factors=factor_table(arms))
    payload["wall_s"] = round(time.perf_counter() - started, 1)
    if args.rank == 0:
        path = report.write_json("actor_update", payload)
        print(f"wall {payload['wall_s']}s" + (f"; wrote {path}" if path else ""), flush=True)
        print_tables(payload)
    torch.distributed.destroy_process_group()
    passed = all(payload["checks"][name] for name in ("losses_agree", "packed_arms_stayed_packed", "chunked_arms_ran_chunked"))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

"""The record of a node run (results/node/<recipe>[-<variant>].<hardware>.json): what ran (recipe, shape, layers, GPUs,
the machine and why, every override with its reason, the launcher's fallbacks from launch.json too), what it measured
and which gates failed (gates.py).

Measured, from what the run left behind:
- memory: each phase's allocator peak (verl_recipes/runtime/phase_memory.py: update_actor, old_log_prob, ref,
  weight_push; the weight push's GPU use is the rollout's footprint, vLLM included) and `peak_memory_gib`, their
  largest: the trainer's allocator peak over its phases, as the planner defines its peak (Plan.allocated_gib,
  verl_recipes/planner/plan.py), against `planned_peak_gib`, the planner on the launched config;
- time: verl's metrics reduced as the end-to-end bench reduces them (verl_recipes/bench/e2e_report.py: the first step
  left out): step time, every timing_s/* phase, tokens/s, verl's MFU (perf/mfu/*), the realised response lengths;
- rollout: each vLLM engine's KV cache (run_log.py) in tokens and in sequences of the task's length, and preemptions;
- agreement: the worst value over the steps of each train/rollout agreement metric, with the smokes' bound.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from omegaconf import DictConfig

from verl_recipes import entrypoints
from verl_recipes.bench import e2e_report, report
from verl_recipes.check.gates import AGREEMENT, SIDES, read_metrics
from verl_recipes.launch import LAUNCH_RECORD, VERL_LOG
from verl_recipes.node import gates, run_log
from verl_recipes.node.config import NodeConfig
from verl_recipes.planner import Plan
from verl_recipes.runtime import vllm_preemptions

MAX_MEMORY = "actor/perf/max_memory_allocated_gb"  # verl's own figure: with phase_memory on, the update phase's


def agreement(steps: dict[int, dict]) -> dict:
    out = {}
    for metric, bound, side in AGREEMENT:
        values = [float(data[metric]) for data in steps.values() if metric in data]
        if values:
            out[metric] = {"worst": SIDES[side][1](values), "bound": bound, "side": side}
    return out


def launcher_added(launch_dir: Path, ours: list[str]) -> list[dict]:
    """What the launcher added to the node run's arguments (launch.json): its fallbacks for a package this node lacks."""
    path = launch_dir / LAUNCH_RECORD
    launched = json.loads(path.read_text()).get("args", []) if path.is_file() else []
    return [{"key": arg, "value": None, "why": "added by the launcher for a package this node lacks (flash-attn, "
                                             "apex: verl_recipes/check/preflight.py fallback_overrides)"}
            for arg in launched if arg not in ours]


def peak(phases: dict[str, dict]) -> float | None:
    return max((phase["peak_gib"] for phase in phases.values()), default=None)


def name(recipe_name: str, variant: str | None, hardware: str) -> str:
    """<recipe>[-<variant>].<hardware>: the record's file name, without .json."""
    return f"{recipe_name}{f'-{variant}' if variant else ''}.{hardware}"


def build(node: NodeConfig, model: str, cfg: DictConfig, planned: Plan, rc: int, launch_dir: Path,
          phases: dict[str, dict], hardware: str, wall_s: float) -> dict:
    """The record of the run launched as `cfg` (launch_dir: its metrics.jsonl and verl.log), gates evaluated."""
    metrics, log_file = launch_dir / "metrics.jsonl", launch_dir / VERL_LOG
    steps = read_metrics(metrics) if metrics.is_file() else {}
    log = log_file.read_text(errors="replace") if log_file.is_file() else ""
    expected = int(cfg.trainer.total_training_steps)
    sequences = expected * int(cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n)
    seq_tokens = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    kv_tokens, preemptions, measured = run_log.kv_cache_tokens(log), vllm_preemptions.total(log), peak(phases)
    failures = gates.failures(
        rc, steps, expected, lag=entrypoints.get(node.recipe.entrypoint).metrics_lag,
        bypass=bool(cfg.algorithm.rollout_correction.bypass_mode), oom_lines=run_log.oom_lines(log),
        preemptions=preemptions, sequences=sequences, peak_gib=measured, planned_peak_gib=planned.allocated_gib)
    reduced = e2e_report.reduce(steps, sequences) if steps else {}
    per_gpu = reduced.get("throughput_tokens_per_s_per_gpu")
    verl_peaks = [float(data[MAX_MEMORY]) for data in steps.values() if MAX_MEMORY in data]
    return {
        "recipe": node.recipe.label,
        "shape": node.hub_id,
        "layers": node.layers,  # None: all of the model's layers
        "gpus": node.gpus,
        "args": node.user_args,  # the user's ARGS: the recipe as changed before the node's overrides apply
        "hardware": hardware,
        "machine": {"kind": node.machine.kind, "gpu_memory_gib": node.machine.gpu_memory_gib, "why": node.machine.why},
        "steps": expected,
        "steps_logged": reduced.get("steps_logged", 0),
        "rc": rc,
        "passed": not failures,
        "failures": failures,
        "peak_memory_gib": measured,
        "planned_peak_gib": planned.allocated_gib,
        "peak_error": (measured - planned.allocated_gib) / planned.allocated_gib if measured is not None else None,
        "memory_phases": phases,
        "verl_max_memory_allocated_gb": max(verl_peaks, default=None),
        "planner": {"verdict": planned.verdict, "lines": planned.lines},
        "step_s": reduced.get("step_s"),
        "steps_s": reduced.get("steps_s"),
        "phases_s": reduced.get("phases_s"),
        "tokens_per_s": per_gpu * node.gpus if per_gpu else None,
        "tokens_per_s_per_gpu": per_gpu,
        "mfu": reduced.get("mfu"),
        "response_length": reduced.get("response_length"),
        "rollout": {
            "kv_cache_tokens": kv_tokens,
            "kv_capacity_sequences": min(kv_tokens) // seq_tokens if kv_tokens else None,
            "sequence_tokens": seq_tokens,
            "max_concurrency": run_log.max_concurrency(log),
            "planned_sequences": planned.rollout.concurrent_sequences if planned.rollout else None,
            "max_num_seqs": int(cfg.actor_rollout_ref.rollout.max_num_seqs),
            "preemptions": preemptions,
            "sequences": sequences,
        },
        "agreement": agreement(steps),
        "overrides": [*(override.as_dict() for override in node.overrides(model)),
                      *launcher_added(launch_dir, node.args(model))],
        "date": time.strftime("%Y-%m-%d"),
        "versions": report.versions(),
        "wall_s": round(wall_s, 1),
    }

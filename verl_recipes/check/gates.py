"""Metric gates for smoke runs: read verl's file logger (JSONL, {"step": n, "data": {...}}) and name what fails.

Every recipe gets the common gates; `recipes/<name>/<version>/checks.yaml` adds its own:
    min:      {metric: lower bound (inclusive)}  e.g. tool calls executed > 0 as {num_tool_calls/mean: 0.001}
    present:  [metric, ...]                      must exist at every step
    node:     {min: ..., present: ...}           only for node smokes with a real model
    variants: {name: {drop: [metric, ...],       `present` metrics a variant does not log
                      present: [metric, ...]}}   and metrics only that variant logs (e.g. its weight sync)
    frozen:   [module, ...]                      weight gate (verl_recipes/check/weights.py): tensors under these
                                                 modules stay bit-identical in the last step's saved weights
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from verl_recipes import yaml_parser

# (metric, bound, side): every step must hold it; a side is (holds(value, bound), the worst of values)
SIDES = {"max": (lambda v, b: v <= b, max), "min": (lambda v, b: v >= b, min),
         "abs": (lambda v, b: abs(v) <= b, lambda vs: max(vs, key=abs))}
# verl's train/rollout agreement (trainer log-probs against vLLM's for the same tokens): a weight push that does not
# reach the rollout, or a rollout that computes another model, breaks them. Calibrated on the learning runs
# (results/learn/README.md; worst seen 0.0016, 0.9990, 2.2e-4); the smokes sit far inside (at most 3.5e-4, 1.0,
# 2.7e-3). In bypass mode (the async variants) verl recomputes no old log-probs and logs none of them.
PEARSON = "training/rollout_actor_probs_pearson_corr"
AGREEMENT = (
    ("training/rollout_probs_diff_mean", 0.01, "max"),
    (PEARSON, 0.99, "min"),
    ("rollout_corr/k3_kl", 0.01, "max"),
)
# Learning and node runs report the correlation without gating it (their reasons: learn/gates.py, node/gates.py)
AGREEMENT_LESS_PEARSON = tuple(bound for bound in AGREEMENT if bound[0] != PEARSON)

COMMON = {
    "finite": ["actor/pg_loss", "actor/grad_norm"],
    "present": ["critic/score/mean", "timing_s/step", "timing_s/gen", "timing_s/update_actor"],
    "min": {"response_length/mean": 1e-9},
}


def logger_errors(loggers) -> list[str]:
    """`trainer.logger` must keep verl's file logger: the smoke gates, `make runs` and the perf reports read its
    metrics.jsonl, and a list without it (`[console,wandb]`) would drop the file silently."""
    chosen = [str(b) for b in loggers or []]
    if "file" in chosen:
        return []
    return [f"'trainer.logger' = {chosen} has no 'file': the smoke gates, make runs and the reports read its "
            f"metrics.jsonl; use trainer.logger=[{','.join([*chosen, 'file'])}], or a configs/logging fragment "
            f"(ARGS=\"configs/logging=wandb\" is console, file and wandb)"]


def read_metrics(path: Path) -> dict[int, dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics file; was trainer.logger given 'file'?")
    steps = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not JSON ({err})") from None
            steps.setdefault(int(record["step"]), {}).update(record["data"])
    return steps


def load_checks(checks_file: Path | None) -> dict:
    return (yaml_parser.safe_load(checks_file.read_text()) or {}) if checks_file and checks_file.is_file() else {}


def load_gates(checks_file: Path | None, tiny: bool = False, variant: str | None = None, bypass: bool = False) -> dict:
    """The common gates, the recipe's checks.yaml, and the agreement bounds unless the run is in bypass mode."""
    gates = {key: (dict(value) if isinstance(value, dict) else list(value)) for key, value in COMMON.items()}
    gates["bounds"] = [] if bypass else list(AGREEMENT)
    extra = load_checks(checks_file)
    if extra:
        for section in [extra] + ([] if tiny else [extra.get("node") or {}]):
            gates["present"] += section.get("present", [])
            gates["finite"] += section.get("finite", [])
            gates["min"].update(section.get("min", {}))
    own = ((extra.get("variants") or {}).get(variant) or {}) if variant else {}
    drop = set(own.get("drop", []))
    gates["present"] = [m for m in gates["present"] if m not in drop] + list(own.get("present", []))
    return gates


def evaluate(steps: dict[int, dict], expected_steps: int, gates: dict, lag: int = 0) -> list[str]:
    """Failures, each naming its metric and step; an empty list means every gate passed. With `lag` (the entry
    point's metrics lag, verl_recipes/entrypoints.py), the first `lag` steps need only exist."""
    missing = sorted(set(range(1, expected_steps + 1)) - set(steps))
    failures = [f"steps {missing} have no metrics (expected steps 1..{expected_steps})"] if missing else []
    bounds = gates.get("bounds", [])
    required = gates["present"] + gates["finite"] + list(gates["min"]) + [metric for metric, _, _ in bounds]
    for step, data in sorted(steps.items()):
        if step < 1 + lag:
            continue  # step 0 holds validation-before-train metrics only
        for metric in required:
            if metric not in data:
                failures.append(f"step {step}: metric '{metric}' is missing")
        for metric in gates["finite"]:
            if metric in data and not math.isfinite(float(data[metric])):
                failures.append(f"step {step}: '{metric}' = {data[metric]} is not finite")
        for metric, bound in gates["min"].items():
            if metric in data and not float(data[metric]) >= bound:
                failures.append(f"step {step}: '{metric}' = {data[metric]} is below {bound}")
        for metric, bound, side in bounds:
            if metric in data and not SIDES[side][0](float(data[metric]), bound):
                failures.append(f"step {step}: '{metric}' = {data[metric]} is outside its bound ({side} {bound})")
    return failures


def summary(steps: dict[int, dict]) -> list[str]:
    keys = ("timing_s/step", "critic/score/mean", "actor/pg_loss", "actor/grad_norm", "response_length/mean")
    return [f"step {s}: " + " ".join(f"{k}={d[k]:.4g}" for k in keys if k in d) for s, d in sorted(steps.items())]

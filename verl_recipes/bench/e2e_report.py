"""verl's own metrics of one end-to-end run (metrics.jsonl, read by gates.read_metrics) reduced to the bench's report,
and the ratios between two arms.

A step is a row with `timing_s/step`: the fully async trainer logs one per weight version (its `trigger_parameter_sync_step`
updates) and its Rollouter adds rows of its own under the same numbers, one of them (0) before any training.
Two throughputs over the arm's samples:
- steady: steps before `warmup` are left out (the first step compiles, captures graphs and fills caches); the median
  step time and the median of every `timing_s/*` phase, verl's `perf/throughput` (tokens/s per GPU) and `perf/mfu/*`,
  the realised response lengths (`response_length/*`, means over steps), any staleness metric the trainer logged, and
  trained samples/s = samples per step / median step time;
- whole run: samples / the sum of every step's time, first step included. An async pipeline's steps are not alike
  (the first fills the pipe, the next may find its samples ready), so over a few steps only this one compares it
  with a synchronous arm.
"""

import statistics

PHASES = "timing_s/"
MFU = "perf/mfu/"
LENGTHS = "response_length/"


def _median(steps: list[dict], key: str) -> float | None:
    values = [float(step[key]) for step in steps if key in step]
    return statistics.median(values) if values else None


def _mean(steps: list[dict], key: str) -> float | None:
    values = [float(step[key]) for step in steps if key in step]
    return statistics.fmean(values) if values else None


def reduce(steps_by_number: dict[int, dict], samples: int, warmup: int = 1) -> dict:
    """`samples`: what the whole arm trained on (steps x batch x rollout.n)."""
    steps = [steps_by_number[n] for n in sorted(steps_by_number) if "timing_s/step" in steps_by_number[n]]
    kept = steps[warmup:] or steps
    keys = sorted({key for step in kept for key in step})
    step_s = _median(kept, "timing_s/step")
    train_s = sum(float(step["timing_s/step"]) for step in steps)
    samples_per_step = samples / len(steps) if steps else None
    return {
        "steps_logged": len(steps),
        "steps_reported": len(kept),
        "step_s": step_s,
        "steps_s": [round(float(step["timing_s/step"]), 3) for step in steps],
        "phases_s": {key[len(PHASES):]: _median(kept, key) for key in keys if key.startswith(PHASES)},
        "throughput_tokens_per_s_per_gpu": _median(kept, "perf/throughput"),
        "mfu": {key[len(MFU):]: _median(kept, key) for key in keys if key.startswith(MFU)},
        "response_length": {key[len(LENGTHS):]: _mean(kept, key) for key in keys if key.startswith(LENGTHS)},
        "staleness": {key: _mean(kept, key) for key in keys if "staleness" in key},
        "samples_per_step": samples_per_step,
        "samples_per_s": samples_per_step / step_s if step_s else None,
        "samples": samples,
        "train_s": round(train_s, 3),
        "samples_per_s_whole_run": samples / train_s if train_s else None,
    }


RATIOS = {  # name: (path into a report, higher is better)
    "step time": (("step_s",), False),
    "tokens/s per GPU": (("throughput_tokens_per_s_per_gpu",), True),
    "trained samples/s": (("samples_per_s",), True),
    "trained samples/s, whole run": (("samples_per_s_whole_run",), True),
    "gen": (("phases_s", "gen"), False),
    "old_log_prob": (("phases_s", "old_log_prob"), False),
    "ref": (("phases_s", "ref"), False),
    "update_actor": (("phases_s", "update_actor"), False),
    "update_weights": (("phases_s", "update_weights"), False),
    "actor MFU": (("mfu", "actor"), True),
}


def _get(report: dict, path: tuple):
    for key in path:
        report = (report or {}).get(key)
    return report


def ratios(ours: dict, base: dict, ours_name: str, base_name: str) -> dict:
    """`ours_name / base_name` for each quantity both reports hold, oriented so that > 1 means ours is better."""
    out = {}
    for name, (path, higher_better) in RATIOS.items():
        a, b = _get(ours, path), _get(base, path)
        if a and b:
            value = a / b if higher_better else b / a
            factors = f"{ours_name} {a:.4g} vs {base_name} {b:.4g}"
            out[name] = {"speedup": round(value, 3), "factors": factors}
    return out

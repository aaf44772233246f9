"""The trainer's torch allocator peak per phase, for the node runs' record (verl_recipes/node/record.py).

verl 0.9.1 logs one memory figure, actor/perf/max_memory_allocated_gb, from inside the actor update, and never resets
the peak, so it is the process's peak up to that update, start-up included. The planner plans per phase: the actor
update, the old log-probs and the weight push (verl_recipes/planner/plan.py). With PHASE_MEMORY_ENV=<folder> set, each
phase method of verl's ActorRolloutRefWorker resets the peak on entry and, on exit, appends a row to
<folder>/rank<R>.<pid>.jsonl: the phase, the rank, the allocator peak (GiB) and the whole GPU's use (every process on it,
vLLM's too, from cudaMemGetInfo). After the weight push the rollout has woken its KV cache, so that phase's GPU use is
the rollout's footprint.

verl loads this module in every process (the `verl.plugins` entry point in pyproject.toml); without the variable it
does nothing. With it, verl's own actor/perf/max_memory_allocated_gb becomes the update phase's peak.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from pathlib import Path

from verl_recipes.runtime.after_import import after_import

PHASE_MEMORY_ENV = "VERL_RECIPES_PHASE_MEMORY"
MODULE = "verl.workers.engine_workers"
# ActorRolloutRefWorker's method -> the phase, as the record names it
PHASES = {"update_actor": "update_actor", "compute_log_prob": "old_log_prob", "compute_ref_log_prob": "ref",
          "update_weights": "weight_push"}
GIB = 2**30
MARK = "_phase_memory"


def _cuda():
    import torch

    return torch.cuda


def recorded(method, phase: str, folder: Path, device=None):
    """`method` (sync or async) with the allocator peak reset before it and its row written after it, even when it
    raises (an out-of-memory error shows where it struck). `device`: torch.cuda, or a stand-in in tests."""

    def start():
        (device or _cuda()).reset_peak_memory_stats()

    def write():
        cuda = device or _cuda()
        free, total = cuda.mem_get_info()
        rank = int(os.environ.get("RANK", "0"))
        row = {"phase": phase, "rank": rank, "peak_gib": cuda.max_memory_allocated() / GIB,
               "device_used_gib": (total - free) / GIB}
        with open(folder / f"rank{rank}.{os.getpid()}.jsonl", "a") as out:
            out.write(json.dumps(row) + "\n")

    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)  # keeps verl's @register attributes, which its worker group dispatches by
        async def wrapper(*args, **kwargs):
            start()
            try:
                return await method(*args, **kwargs)
            finally:
                write()
    else:
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            start()
            try:
                return method(*args, **kwargs)
            finally:
                write()
    setattr(wrapper, MARK, phase)
    return wrapper


def patch(module, folder: Path | None = None) -> None:
    folder = folder or Path(os.environ[PHASE_MEMORY_ENV])
    cls = module.ActorRolloutRefWorker
    for name, phase in PHASES.items():
        method = getattr(cls, name)
        if not hasattr(method, MARK):
            setattr(cls, name, recorded(method, phase, folder))


def read(folder: Path) -> dict[str, dict]:
    """Phase -> the largest allocator peak and GPU use over every call on every rank, and the number of calls."""
    out: dict[str, dict] = {}
    for path in sorted(Path(folder).glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            phase = out.setdefault(row["phase"], {"peak_gib": 0.0, "device_used_gib": 0.0, "calls": 0})
            phase["peak_gib"] = max(phase["peak_gib"], row["peak_gib"])
            phase["device_used_gib"] = max(phase["device_used_gib"], row["device_used_gib"])
            phase["calls"] += 1
    return out


if os.environ.get(PHASE_MEMORY_ENV):
    after_import(MODULE, patch)

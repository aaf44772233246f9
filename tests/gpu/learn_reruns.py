"""Every learning proof rerun over seeds, runs and controls, on one lent machine: lays the jobs out over lanes
(tests/gpu/side_by_side.sh) and runs them there, so a host's GPUs stay busy across device calls.

    python3 tests/gpu/learn_reruns.py SECONDS [--gpus 4] [--lanes 1] [--seeds 1 2 3] [--recipes R[:VARIANT] ...]
                                          [--controls none shuffled stale] [--jobs RECIPE,SEED,CONTROL ...]
One lane a GPU, and keep it so for proofs: vLLM reads the whole GPU's free memory at start-up and again each time it
sleeps, so a neighbour's allocations fail it. With four lanes a GPU (2026-11-27, 4 x H200) sixteen jobs overloaded
the host's 64 cores and two start-ups failed; with two, four of seventeen start-ups failed beside a neighbour, and
with a fixed KV cache (which skips the start-up reading) a VL run still died at step 9 in vLLM's sleep check
(results/learn/README.md). `--lanes 2` suits text-only smoke work, not a run that must count. Jobs also get OMP_NUM_THREADS=4: the VL warm-up's image processing took 8-29 cores each.
Jobs go in the order given (recipe by recipe, each seed's run then its control), each to the lane that frees up
first by an equal-length guess; a two-GPU variant (separate_async: trainer 1, rollout 1) takes lanes of two GPUs.
Each job is `SEED=n bash tests/gpu/learn_tiny.sh RECIPE CONTROL`, its files copied to $LEARN_OUT.
A layout whose lanes hold more jobs than SECONDS fits at --job-s each is refused: at the deadline side_by_side.sh
kills what still runs, and two controls killed in their last validation were lost that way (2026-11-27, 17:13 UTC:
three waves of ~420 s and their start-up gaps in 1400 s).
"""

from __future__ import annotations

import argparse
import os
import string
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECIPES = ["qwen25-7b-grpo", "qwen25-vl-7b-geo3k-dapo", "retool-qwen25-7b", "qwen25-7b-grpo:separate_async"]
TWO_GPUS = ("separate_async",)
JOB_S = 480  # a tiny learning run's wall time with its start-up: 290-500 s on H200 (results/learn); SmolLM2's 860


def jobs(recipes: list[str], seeds: list[int], controls=("none", "shuffled")) -> list[tuple[str, int, str, int]]:
    """(recipe, seed, control, GPUs) in run order."""
    return [(recipe, seed, control, 2 if recipe.endswith(TWO_GPUS) else 1)
            for recipe in recipes for seed in seeds for control in controls]


def listed(spec: str) -> list[tuple[str, int, str, int]]:
    """One job of --jobs: "RECIPE[:VARIANT],SEED,CONTROL"."""
    recipe, seed, control = spec.split(",")
    return jobs([recipe], [int(seed)], [control])


def lay_out(planned: list[tuple[str, int, str, int]], gpus: int, lanes: int) -> list[str]:
    """side_by_side.sh job strings: each job on the lane(s) free first; "+" chains it behind the lane's last job."""
    free = {f"{g}.{string.ascii_lowercase[lane]}": 0 for lane in range(lanes) for g in range(gpus)}
    used: set[str] = set()
    out = []
    for recipe, seed, control, width in planned:
        chosen: list[str] = []
        for lane in sorted(free, key=lambda name: (free[name], name)):
            if all(lane.split(".")[0] != c.split(".")[0] for c in chosen):
                chosen.append(lane)
            if len(chosen) == width:
                break
        start = max(free[c] for c in chosen)
        for c in chosen:
            free[c] = start + 1
        queued = "+" if any(c in used for c in chosen) else ""
        used.update(chosen)
        name = f"{recipe.replace(':', '_')}.{control}.s{seed}"
        out.append(f"{queued}{','.join(chosen)} {name} env SEED={seed} OMP_NUM_THREADS=4 bash {HERE}/learn_tiny.sh "
                   f"{recipe} {control}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seconds", type=int)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--lanes", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--recipes", nargs="+", default=RECIPES)
    parser.add_argument("--controls", nargs="+", default=["none", "shuffled"],
                        help="each seed's runs: none (the run), shuffled and stale (its controls)")
    parser.add_argument("--jobs", nargs="+", metavar="RECIPE,SEED,CONTROL",
                        help="these jobs in this order instead of --recipes x --seeds x --controls")
    parser.add_argument("--dry-run", action="store_true", help="print the side_by_side.sh jobs; run nothing")
    parser.add_argument("--job-s", type=int, default=JOB_S, help="a job's expected seconds, start-up included")
    ns = parser.parse_args(argv)
    planned = [job for spec in ns.jobs for job in listed(spec)] if ns.jobs else jobs(ns.recipes, ns.seeds, ns.controls)
    laid = lay_out(planned, ns.gpus, ns.lanes)
    waves = max(Counter(lane for job in laid for lane in job.split()[0].lstrip("+").split(",")).values())
    stagger = int(os.environ.get("STAGGER_S", "15")) * sum(not job.startswith("+") for job in laid)
    if waves * ns.job_s + stagger > ns.seconds:
        parser.error(f"{len(planned)} jobs make {waves} on a lane: {waves} x {ns.job_s} s + {stagger} s of start-up "
                     f"gaps > {ns.seconds} s; the deadline would kill the last. Give more seconds or fewer --jobs")
    if ns.dry_run:
        print("\n".join(laid))
        return 0
    os.execvp("bash", ["bash", str(HERE / "side_by_side.sh"), str(ns.seconds), *laid])


if __name__ == "__main__":
    raise SystemExit(main())

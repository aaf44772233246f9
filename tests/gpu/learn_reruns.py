"""Every learning proof rerun over seeds, runs and controls, on one lent machine: lays the jobs out over lanes
(tests/gpu/side_by_side.sh) and runs them there, so a host's GPUs stay busy across device calls.

    python3 tests/gpu/learn_reruns.py SECONDS [--gpus 4] [--lanes 1] [--seeds 1 2 3] [--recipes R[:VARIANT] ...]
                                          [--controls none shuffled stale] [--jobs RECIPE,SEED,CONTROL ...]
One lane a GPU, and keep it so for proofs: vLLM reads the whole GPU's free memory at start-up and again each time it
sleeps, so a neighbour's allocations fail it. With four lanes a GPU (2026-11-27, 4 x H200) sixteen jobs overloaded
the host's 64 cores and two start-ups failed; with two, four of seventeen start-ups failed beside a neighbour, and
with a fixed KV cache (which skips the start-up reading) a VL run still died at step 9 in vLLM's sleep check
(results/learn/README.md). `--lanes 2` suits text-only smoke work, not a run that must count. Jobs also get OMP_NUM_THREADS=4: the VL warm-up's image processing took 8-29 cores each.
Jobs go in the order given (recipe by recipe, each seed's run then its control), each to the lane expected to free
up first (verl_recipes/gpu_queue.py: --job-s each, a recipe of EXPECTED_S its own); a two-GPU variant
(separate_async: trainer 1, rollout 1) takes lanes of two GPUs. Each job is `SEED=n bash tests/gpu/learn_tiny.sh
RECIPE CONTROL`, its files copied to $LEARN_OUT.
A layout whose last job is expected to end after SECONDS is refused: at the deadline side_by_side.sh kills what still
runs, and two controls killed in their last validation were lost that way (2026-11-27, 17:13 UTC: three waves of
~420 s and their start-up gaps in 1400 s). An equal-length guess once queued ReTool runs behind SmolLM2's, which take
three times as long (2026-11-27, 20:58 UTC).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parents[1]))  # verl_recipes from this checkout where none is installed (the lent machine)

from verl_recipes import gpu_queue  # noqa: E402

RECIPES = ["qwen25-7b-grpo", "qwen25-vl-7b-geo3k-dapo", "retool-qwen25-7b", "qwen25-7b-grpo:separate_async"]
TWO_GPUS = ("separate_async",)
JOB_S = 480  # a tiny learning run's wall time with its start-up: 290-500 s on H200 (results/learn)
# SmolLM2's run: its model's preparation and sampled baseline (64 rows a call since 8272f72), then 50 steps of 10-13 s;
# 862 s with nine neighbours, about 21 minutes beside three ReTool builds when the baseline took a row a call (4 x H200)
EXPECTED_S = {"smollm2-135m-grpo": 900}


def jobs(recipes: list[str], seeds: list[int], controls=("none", "shuffled")) -> list[tuple[str, int, str, int]]:
    """(recipe, seed, control, GPUs) in run order."""
    return [(recipe, seed, control, 2 if recipe.endswith(TWO_GPUS) else 1)
            for recipe in recipes for seed in seeds for control in controls]


def listed(spec: str) -> list[tuple[str, int, str, int]]:
    """One job of --jobs: "RECIPE[:VARIANT],SEED,CONTROL"."""
    recipe, seed, control = spec.split(",")
    return jobs([recipe], [int(seed)], [control])


def queue_jobs(planned: list[tuple[str, int, str, int]], job_s: float) -> list[gpu_queue.Job]:
    return [gpu_queue.Job(f"{recipe.replace(':', '_')}.{control}.s{seed}",
                          f"env SEED={seed} OMP_NUM_THREADS=4 bash {HERE}/learn_tiny.sh {recipe} {control}",
                          EXPECTED_S.get(recipe, job_s), width)
            for recipe, seed, control, width in planned]


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
    parser.add_argument("--job-s", type=int, default=JOB_S,
                        help="a job's expected seconds, start-up included (EXPECTED_S's recipes: their own)")
    ns = parser.parse_args(argv)
    planned = [job for spec in ns.jobs for job in listed(spec)] if ns.jobs else jobs(ns.recipes, ns.seeds, ns.controls)
    stagger = int(os.environ.get("STAGGER_S", "15"))
    try:
        laid = gpu_queue.lay_out(queue_jobs(planned, ns.job_s), ns.gpus, stagger, ns.lanes)
    except ValueError as err:
        parser.error(str(err))
    took = gpu_queue.finish_s(laid)
    if took > ns.seconds:
        parser.error(f"{len(planned)} jobs end about {took:.0f} s in (start-ups {stagger} s apart) > {ns.seconds} s; "
                     "the deadline would kill the last. Give more seconds or fewer --jobs")
    if ns.dry_run:
        for placed in laid:
            print(placed.planned())
        return 0
    os.execvp("bash", ["bash", str(HERE / "side_by_side.sh"), str(ns.seconds), *(placed.line() for placed in laid)])


if __name__ == "__main__":
    raise SystemExit(main())

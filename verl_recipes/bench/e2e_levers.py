"""The lever arms of the end-to-end bench on the GPUs of one host, side by side with `ours` (issue 43).

Each wave runs `ours` and up to GPUS - 1 lever arms at once, one arm per GPU (tests/gpu/side_by_side.sh), so every
lever has an `ours` of its own wave on the same host under the same neighbours; `ours` moves to another GPU each
wave, so a slow card shows as two `ours` that disagree. Jobs of later waves queue behind the one on their GPU.
Each arm's wall time (start-up included) is the longest committed for it in bench/results/e2e.<arm>.*.json, else
`ours`' (the levers have none yet). A plan whose busiest GPU does not fit SECONDS is refused: side_by_side.sh kills
what still runs at its deadline.

    python -m verl_recipes.bench.e2e_levers SECONDS [--gpus 4] [--arms A,B,...] [--in-order] [--dry-run]
    (on the lent machine: bash tests/gpu/bench_levers.sh SECONDS ...; its header has the device calls)
--in-order runs the arms as given in one wave, no `ours` added (on one GPU: one after another), for a lease too short
for an `ours` per wave, e.g. `--gpus 1 --in-order --arms verl_example,ours`. An SGLang arm (`ours_sglang`) runs in
SGLang's layer set (tests/gpu/pack_sglang.sh, installed as its header says) and the vLLM arms in the kit's.
Files: $LEVERS_OUT/w<wave>/e2e.<arm>.{json,metrics.jsonl,config.yaml}, logs $LEVERS_OUT/w<wave>.<arm>.log.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from verl_recipes.bench import e2e_arms
from verl_recipes.catalog import REPO

RESULTS = REPO / "bench/results"
LEVERS = [arm for arm, settings in e2e_arms.ARMS.items() if settings.fragment and not settings.bundle]


def wall_s(arm: str) -> float:
    """The longest committed wall time of the arm, start-up included; `ours`' for an arm never run."""
    walls = [json.loads(path.read_text())["wall_s"] for path in RESULTS.glob(f"e2e.{arm}.*.json")]
    return max(walls) if walls else wall_s("ours")


def waves(arms: list[str], gpus: int) -> list[list[str]]:
    """Arms per wave, slot i on GPU i % gpus: ours and the next gpus - 1 arms (one on one GPU), ours in slot
    wave % gpus."""
    size = max(gpus - 1, 1)
    out = []
    for start in range(0, len(arms), size):
        wave = arms[start:start + size]
        wave.insert(len(out) % gpus, "ours")
        out.append(wave)
    return out


def jobs(planned: list[list[str]], gpus: int, out: Path) -> list[str]:
    """side_by_side.sh job strings; a job of a later wave queues ("+GPU") behind its GPU's last one."""
    lines = []
    for number, wave in enumerate(planned, 1):
        for slot, arm in enumerate(wave):
            queued = "+" if number > 1 or slot >= gpus else ""
            name = f"w{number}.{arm}"
            # an SGLang arm runs in SGLang's layer set, not the kit's vLLM one (tests/gpu/with_sglang.sh)
            layers, wrap = ("@none", "bash tests/gpu/with_sglang.sh ") if e2e_arms.ARMS[arm].rollout == "sglang" else ("", "")
            lines.append(f"{queued}{slot % gpus} {name}{layers} env OUT={out}/w{number} {wrap}bash tests/gpu/bench_e2e.sh "
                         f"--arm {arm} --work /tmp/side/{name}/e2e")
    return lines


def busiest_gpu_s(planned: list[list[str]], gpus: int, stagger: int) -> float:
    """Seconds until the last job ends: each GPU's jobs back to back, the first wave started `stagger` s apart."""
    busy = [0.0] * gpus
    for wave in planned:
        for slot, arm in enumerate(wave):
            busy[slot % gpus] += wall_s(arm)
    return max(total + stagger * gpu for gpu, total in enumerate(busy) if total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seconds", type=int, help="the deadline of the whole queue")
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--arms", default=",".join(LEVERS), help="one-GPU arms beside ours (default: every lever)")
    parser.add_argument("--in-order", action="store_true", help="the arms as given in one wave, no ours added")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the jobs; run nothing")
    ns = parser.parse_args(argv)
    arms = [arm for arm in ns.arms.split(",") if ns.in_order or arm != "ours"]
    wrong = [arm for arm in arms if arm not in e2e_arms.ARMS or e2e_arms.ARMS[arm].gpus != 1]
    if wrong:
        parser.error(f"not one-GPU arms of verl_recipes/bench/e2e_arms.py: {', '.join(wrong)}")
    out = Path(os.environ.get("LEVERS_OUT", "/tmp/levers"))
    planned = [arms] if ns.in_order else waves(arms, ns.gpus)
    needed = busiest_gpu_s(planned, ns.gpus, int(os.environ.get("STAGGER_S", "15")))
    for number, wave in enumerate(planned, 1):
        print(f"# wave {number}: " + ", ".join(
            f"GPU {slot % ns.gpus} {arm} ~{wall_s(arm):.0f} s"
            + (" (changes the math)" if e2e_arms.ARMS[arm].changes_math else "") for slot, arm in enumerate(wave)))
    added = "" if ns.in_order else f" and {len(planned)} x ours"
    print(f"# {len(arms)} arms{added} on {ns.gpus} GPU(s): ~{needed:.0f} s of {ns.seconds} s")
    if needed > ns.seconds:
        parser.error(f"the busiest GPU needs ~{needed:.0f} s > {ns.seconds} s; give more seconds or fewer --arms")
    laid = jobs(planned, ns.gpus, out)
    if ns.dry_run:
        print("\n".join(laid))
        return 0
    for number in range(1, len(planned) + 1):
        (out / f"w{number}").mkdir(parents=True, exist_ok=True)
    os.environ["OUT"] = str(out)  # the kit's run.sh logs each job to $OUT/<name>.log, kept across device calls
    os.execvp("bash", ["bash", str(REPO / "tests/gpu/side_by_side.sh"), str(ns.seconds), *laid])


if __name__ == "__main__":
    raise SystemExit(main())

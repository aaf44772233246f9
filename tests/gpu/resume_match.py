"""Issue 45's exact resume: a relaunch's first step against the uninterrupted run's same step, within the run-to-run
noise, which it measures.

    python3 tests/gpu/resume_match.py DIR        (DIR: the suite's out folder on the machine, or results/faults here)

reads what tests/gpu/faults.py leaves in DIR: each mode's reference record (`faults.py reference`: the chain's launch
left uninterrupted, once with the recipe's rollout seed, once with another) and the fault records whose relaunch
resumed (each names its relaunch's metrics, DIR/metrics/<job>.<n>.jsonl). Writes DIR/resume_match[-<mode>].json and
prints PASS or FAIL with the reasons.

- EXACT: what a complete resume restores exactly: the step counter, the data position (the step's prompts, through
  their lengths), the lr schedule and the KL coefficient. Each must equal the uninterrupted run's at that step, and the
  two references, which differ only in the sampling seed, must agree on them (else the quantity is not deterministic
  and proves nothing).
- NOISY: what sampling moves: score, response length, entropy, the losses, the gradient norm, the actor's KL to the
  reference (near 0 again for an actor that was not restored) and the rollout-trainer mismatch (large when vLLM serves
  other weights than the actor's). The noise of each is the references' difference, pooled (root mean square) over
  the steps a resume lands on (2..K). A resumed step samples afresh, as another seed would, so its difference from
  the uninterrupted run is at most as wide: it must lie within t(0.9995, df) times the noise (a false alarm about 1 in
  1000 a quantity), or within 1 % of the value where the references logged it alike (a bf16 entropy).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

EXACT = ("training/global_step", "training/epoch", "prompt_length/mean", "prompt_length/max", "prompt_length/min",
         "actor/lr", "actor/kl_coef")
DATA_POSITION = ("prompt_length/mean", "prompt_length/max", "prompt_length/min")  # without them nothing is proven
NOISY = ("critic/score/mean", "response_length/mean", "actor/entropy", "actor/pg_loss", "actor/grad_norm",
         "actor/kl_loss", "rollout_corr/kl")
# Student's t, two-sided 99.9 % (the 0.9995 quantile), by degrees of freedom
T_999 = {1: 636.62, 2: 31.599, 3: 12.924, 4: 8.610, 5: 6.869, 6: 5.959, 7: 5.408, 8: 5.041, 9: 4.781, 10: 4.587}
FLOOR = 0.01  # relative: bf16 quantities both references logged alike
FIRST_RESUMABLE = 2  # a relaunch resumes a checkpoint of step >= 1, so its first step is >= 2
REFERENCE = "reference"  # DIR/reference[-<mode>].json, written by `faults.py reference`
METRICS = "metrics"  # DIR/metrics/<job>.<n>.jsonl: the chains' launches and the references' runs (.s<seed>)


def record_name(name: str, mode: str) -> str:
    """DIR's records: <name>.json for the colocated mode, <name>-<mode>.json for another (faults.py writes them)."""
    return f"{name}.json" if mode == "colocated" else f"{name}-{mode}.json"


def read_steps(path: Path) -> dict[int, dict]:
    """verl's file logger (one JSON line a log call, merged per step); a line still being written is left out."""
    steps: dict[int, dict] = {}
    text = path.read_text() if path.is_file() else ""
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        if line.endswith("\n") and line.strip():
            try:
                record = json.loads(line)
                steps.setdefault(int(record["step"]), {}).update(record["data"])
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{n}: not a line of verl's file logger ({err!r})") from None
    return steps


def same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def noise(own: dict[int, dict], other: dict[int, dict]) -> dict[str, dict]:
    """Per NOISY quantity both references logged at two or more of the steps 2..K: the root mean square of their
    difference, its degrees of freedom (the steps) and the bound's t."""
    out = {}
    for key in NOISY:
        diffs = [own[s][key] - other[s][key] for s in sorted(own)
                 if s >= FIRST_RESUMABLE and s in other and key in own[s] and key in other[s]]
        if len(diffs) >= 2:
            df = min(len(diffs), max(T_999))
            out[key] = {"rms": math.sqrt(sum(d * d for d in diffs) / len(diffs)), "df": len(diffs), "t": T_999[df]}
    return out


def reference_failures(own: dict[int, dict], other: dict[int, dict], steps: int) -> list[str]:
    """The references must reach `steps` and agree on every EXACT quantity."""
    out = [f"the {name} reference logged steps {sorted(s for s in run if s)}, not 1..{steps}"
           for name, run in (("own-seed", own), ("other-seed", other)) if not set(range(1, steps + 1)) <= set(run)]
    for s in sorted(set(own) & set(other)):
        out += [f"the references differ at step {s} on {key} ({own[s][key]} and {other[s][key]}): it is not "
                f"deterministic, so it cannot show a resume" for key in EXACT
                if key in own[s] and key in other[s] and not same(own[s][key], other[s][key])]
    return out


def compare(step: int, resumed: dict, reference: dict, spread: dict[str, dict]) -> dict:
    """One relaunch's first step (`resumed`) against the uninterrupted run's same step."""
    exact = {key: {"resumed": resumed[key], "reference": reference[key], "ok": same(resumed[key], reference[key])}
             for key in EXACT if key in resumed and key in reference}
    noisy = {}
    for key, n in spread.items():
        if key in resumed and key in reference:
            allowed = max(n["t"] * n["rms"], FLOOR * abs(reference[key]))
            diff = resumed[key] - reference[key]
            noisy[key] = {"resumed": resumed[key], "reference": reference[key], "diff": diff, "noise": n["rms"],
                          "allowed": allowed, "ok": abs(diff) <= allowed}
    failed = [f"{key} {v['resumed']} != {v['reference']}" for key, v in exact.items() if not v["ok"]]
    failed += [f"{key} {v['resumed']:.6g} is {abs(v['diff']):.3g} from {v['reference']:.6g}, over the "
               f"{v['allowed']:.3g} the noise allows" for key, v in noisy.items() if not v["ok"]]
    failed += [f"{key} is not in both runs' step {step}" for key in DATA_POSITION if key not in exact]
    return {"step": step, "exact": exact, "noisy": noisy, "failures": failed}


def point(rec: dict, out: Path, own: dict[int, dict], spread: dict[str, dict]) -> dict:
    """A fault record's relaunch: its first step must be the one after the checkpoint it resumed."""
    steps = read_steps(out / METRICS / rec["relaunch_metrics"])
    first = min((s for s in steps if s > 0), default=None)
    expected = int(rec["checkpoint"].rsplit("_", 1)[1]) + 1
    about = {"fault": rec["fault"], "metrics": rec["relaunch_metrics"], "checkpoint": rec["checkpoint"]}
    if first != expected:
        return {**about, "step": first, "failures": [f"the relaunch's first logged step is {first}, not {expected} "
                                                     f"(the one after {rec['checkpoint']})"]}
    if first not in own:
        return {**about, "step": first, "failures": [f"the reference has no step {first}: run `faults.py reference` "
                                                     f"with --steps {first} or more"]}
    return {**about, **compare(first, steps[first], own[first], spread)}


def start_failures(out: Path, relaunches: list[str], own: dict[int, dict]) -> list[str]:
    """Each chain's first launch (<job>.0.jsonl) must start as the reference did: the same step 1 on every EXACT
    quantity, else the two ran other tiny models or data and no later step compares."""
    failed = []
    for first in sorted({name.rsplit(".", 2)[0] + ".0.jsonl" for name in relaunches}):
        step1 = read_steps(out / METRICS / first).get(1, {})
        failed += [f"{first} differs from the reference at step 1 on {key} ({step1[key]} and {own[1][key]}): the chain "
                   f"and the reference did not start alike (another tiny model or data)" for key in EXACT
                   if 1 in own and key in step1 and key in own[1] and not same(step1[key], own[1][key])]
    return failed


def match(out: Path, mode: str) -> dict | None:
    """The mode's record, or None when it has no reference."""
    ref_file = out / record_name(REFERENCE, mode)
    if not ref_file.is_file():
        return None
    ref = json.loads(ref_file.read_text())
    # a reference job cut by its deadline names only the runs it made
    own, other = (read_steps(out / METRICS / ref["metrics"].get(which, "")) for which in ("own", "other"))
    spread = noise(own, other)
    failures = reference_failures(own, other, ref["steps"])
    records = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    points = [point(rec, out, own, spread) for rec in records
              if rec.get("mode") == mode and rec.get("recipe") == ref["recipe"] and rec.get("resumed")
              and rec.get("relaunch_metrics")]
    if not points:
        failures.append(f"no relaunch of {ref['recipe']} that resumed has its metrics in {out / METRICS}")
    failures += start_failures(out, [p["metrics"] for p in points], own)
    failures += [f"{p['fault']} (step {p['step']}): {why}" for p in points for why in p["failures"]]
    return {"mode": mode, "recipe": ref["recipe"], "hardware": ref["hardware"], "date": ref["date"],
            "references": ref, "noise": spread, "points": points, "passed": not failures, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out, status = Path(argv[0]), 0
    modes = sorted(json.loads(p.read_text())["mode"] for p in out.glob(f"{REFERENCE}*.json"))
    for mode in modes:
        rec = match(out, mode)
        (out / record_name("resume_match", mode)).write_text(json.dumps(rec, indent=1) + "\n")
        print(f"[resume] {mode}: {len(rec['points'])} resumed step(s): "
              f"{'PASS' if rec['passed'] else 'FAIL: ' + '; '.join(rec['failures'])}")
        status |= not rec["passed"]
    if not modes:
        print(f"{out}: no {REFERENCE}*.json; run `python3 tests/gpu/faults.py reference RECIPE` first", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    raise SystemExit(main())

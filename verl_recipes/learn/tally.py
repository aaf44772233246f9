"""Pass counts over every committed learning run (results/learn/*.json): one row per recipe, task version and control.

    python -m verl_recipes.learn.tally [--write results/learn/README.md]
prints the table, or writes it into the README between its tally markers (a test holds the README to the files).
A run passes when it learned; a control passes when its score gate failed, as it must; each graded by the gates in
force (verl_recipes/learn/gates.passes). Every rerun is counted, failures included: a result picked from several
tries is not a result.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from verl_recipes.learn import gates

RESULTS = Path(__file__).resolve().parents[2] / "results" / "learn"
BEGIN, END = "<!-- tally: python -m verl_recipes.learn.tally --write -->", "<!-- /tally -->"
HEADER = ("| recipe | task | control | passed / runs | seeds | last 5 steps' score, each run | wall s, each run |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")


def records(folder: Path = RESULTS) -> list[dict]:
    return [{**json.loads(path.read_text()), "file": path.name} for path in sorted(folder.glob("*.json"))]


def score(run: dict) -> str:
    """The last 5 steps' score, or how the run ended: a run that stopped before its first step (a start-up failure,
    its JSON's `failure` says which) learned nothing either way."""
    if not run["rc"]:
        return f"{round(run['last_score'], 3) + 0.0:.3f}"  # + 0.0: a -0.0 reads 0.000
    return f"exit {run['rc']}" + ("" if run.get("curves", {}).get("score") else " before step 1")


LIGER = "+configs/kernels=liger"


def setting(run: dict) -> tuple:
    """What a rerun repeats: the task's version (records from before versions ran version 1), the lr, the steps and
    the user's overrides, and last whether Liger's kernels ran. A card's learn_args may change the lr or the steps for
    the same task, so a run at another lr or length is counted apart, and a learns: line rests on the runs of the card's
    current setting; a run with overrides of its own (`make <recipe>-learn ARGS=...`, e.g. a lever's fragment) is
    another setting too. Liger's kernels keep the math (bench/README.md), so whether they ran, by the recipe's own
    default or by ARGS, is shown apart but starts no new count (`math_setting`). (Records from before learn.json named
    its lr, 2026-11-27, were given the actor/lr of their metrics; the three that died before step 1, that of their
    lease's other runs of the recipe. Records from before it named its `args` had none; those from before it named
    `liger` (2026-11-29) ran it only by ARGS.)"""
    args = tuple(run.get("args") or ())
    liger = run.get("liger", LIGER in args)
    return (run["task"], run.get("task_version") or 1, run.get("lr"), run.get("steps"),
            tuple(arg for arg in args if arg != LIGER), liger)


def math_setting(run: dict) -> tuple:
    """setting() without the kernels: the runs a learns: line counts together."""
    return setting(run)[:-1]


def label(run: dict) -> str:
    task, version, lr, steps, args, liger = setting(run)
    return (f"{task} v{version}" + (f" at lr {lr:g}" if lr is not None else "") + (f", {steps} steps" if steps else "")
            + (f", with {' '.join(args)}" if args else "") + (", Liger kernels" if liger else ""))


def table(runs: list[dict]) -> str:
    groups = defaultdict(list)
    for run in runs:
        groups[(run["recipe"], label(run), run["control"])].append(run)
    lines = [HEADER]
    for (recipe, task, control), group in sorted(groups.items()):
        group.sort(key=lambda r: (r.get("seed") is None, r.get("seed") or 0, r["file"]))
        seeds = ", ".join("-" if r.get("seed") is None else str(r["seed"]) for r in group)
        scores = ", ".join(score(r) for r in group)
        walls = ", ".join(f"{r['wall_s']:.0f}" for r in group)
        passed = sum(gates.passes(r) for r in group)
        lines.append(f"| {recipe} | {task} | {control} | {passed} / {len(group)} | {seeds} | {scores} | {walls} |")
    return "\n".join(lines)


def written(readme: str, body: str) -> str:
    """`readme` with the text between its tally markers replaced by `body`."""
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"the README has no tally markers ({BEGIN} ... {END})")
    head, rest = readme.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{body}\n{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", nargs="?", const=str(RESULTS / "README.md"), default=None,
                        help="write the table into this README (default results/learn/README.md)")
    ns = parser.parse_args(argv)
    body = table(records())
    if ns.write:
        path = Path(ns.write)
        path.write_text(written(path.read_text(), body))
    else:
        print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Pass counts over every committed learning run (results/learn/*.json): one row per recipe, task version and control.

    python -m verl_recipes.learn.tally [--write results/learn/README.md]
prints the table, or writes it into the README between its tally markers (a test holds the README to the files).
A run passes when it learned; a control passes when its score gate failed, as it must. Every rerun is counted,
failures included: a result picked from several tries is not a result.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

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
        return f"{run['last_score']:.3f}"
    return f"exit {run['rc']}" + ("" if run.get("curves", {}).get("score") else " before step 1")


def table(runs: list[dict]) -> str:
    groups = defaultdict(list)
    for run in runs:
        # records from before versions ran version 1; a record that names its lr (from 2026-11-27 on) is counted
        # apart from those at another lr, since a card's learn_args may change it for the same task
        task = f"{run['task']} v{run.get('task_version') or 1}" + (f" at lr {run['lr']:g}" if "lr" in run else "")
        groups[(run["recipe"], task, run["control"])].append(run)
    lines = [HEADER]
    for (recipe, task, control), group in sorted(groups.items()):
        group.sort(key=lambda r: (r.get("seed") is None, r.get("seed") or 0, r["file"]))
        seeds = ", ".join("-" if r.get("seed") is None else str(r["seed"]) for r in group)
        scores = ", ".join(score(r) for r in group)
        walls = ", ".join(f"{r['wall_s']:.0f}" for r in group)
        passed = sum(bool(r["passed"]) for r in group)
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

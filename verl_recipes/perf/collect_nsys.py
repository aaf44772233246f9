"""Gather the Nsight Systems reports of a verl 0.9.1 run and name them by rank, role and step.

    python -m verl_recipes.perf.collect_nsys <root> [<root> ...] <dest>
        [--ray-logs <session>/logs ...] [--profile-steps 1,2,5 [--continuous]]

A root is a Ray session dir (/tmp/ray/session_latest on each node), a `global_profiler.save_path`,
or a folder holding copies of them; every *.nsys-rep below any root is collected.

Where verl 0.9.1 puts the reports (read from its code):
- Ray runs each profiled actor as `nsys profile -o <session>/logs/nsight/worker_process_%p ...`
  (ray/_private/runtime_env/nsight.py); that folder is fixed, one per node. Workers use
  `capture-range=cudaProfilerApi` with `capture-range-end=repeat-shutdown:N`, so nsys writes one
  report per capture range, `worker_process_<pid>.<n>.nsys-rep` with n = 1, 2, ... per process. The
  controller (TaskRunnerV1, `controller_nsight_options`, no capture range) writes `worker_process_<pid>.nsys-rep`.
- With `global_profiler.relocate_results=True` each profiled worker moves its own reports into the
  node-local `global_profiler.save_path` as `<role>_<hostname>_worker_process_<pid>[.<n>].nsys-rep`
  (`NsightSystemsProfiler.relocate_results`); reports nsys had not finished yet stay in Ray's folder.

How each field of the new name is recovered (anything not recovered is written as "unknown"):
- pid, range n: the file name.
- role, host: a relocated name. Role is the worker role (actor_rollout_ref, actor_rollout, actor,
  rollout, ref) or a TrainingWorker's model type (language_model, value_model).
- rank: every profiled worker prints `[Profiler][finish_hook] rank <r>: profiling finished` on its
  last profiled step, which Ray keeps in `<session>/logs/worker-<id>-<job>-<pid>.out`. The logs of
  the report's own session dir are read, plus any --ray-logs dir (for reports copied out of it); a
  pid that maps to different ranks in different dirs (another node) stays unknown.
  `:actor_name:TaskRunnerV1` in such a log marks the controller (role "controller", step "all").
- step: n counts capture ranges of one process, not training steps. Given --profile-steps (the
  run's global_profiler.steps) with whole-step ranges (`global_tool_config.nsys.discrete=False`),
  range n is the n-th profiled step, or with --continuous (`profile_continuous_steps=True`) the n-th
  run of consecutive steps ("1-2"). In discrete mode each annotated call is a range: leave
  --profile-steps out and steps stay unknown.

New name: rank-<r>_role-<role>_step-<s>_host-<host>_pid-<pid>_range-<n>.nsys-rep (range-all when
the file has no range number); names that do not follow either pattern are copied as
unparsed_<name>. dest/manifest.tsv lists every source, its new name and where each field came from.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

UNKNOWN = "unknown"
REPORT_RE = re.compile(r"^(?:(?P<prefix>.+)_)?worker_process_(?P<pid>\d+)(?:\.(?P<range>\d+))?\.nsys-rep$")
WORKER_LOG_RE = re.compile(r"^worker-[0-9a-f]+-[0-9a-f]+-(?P<pid>\d+)\.(out|err)$")
RANK_RE = re.compile(r"\[Profiler\]\[finish_hook\] rank (\d+):")
ACTOR_RE = re.compile(r"^:actor_name:(\S+)")
# Longest first, so "actor_rollout_ref_host" is not read as role "actor".
ROLES = ("actor_rollout_ref", "actor_rollout", "language_model", "value_model", "rollout", "actor", "ref")
CONTROLLER_CLASSES = ("TaskRunnerV1", "TaskRunner")


class CollectError(ValueError):
    """Bad arguments or an unusable source or destination."""


@dataclass
class ProcessInfo:
    rank: str | None = None
    actor_class: str | None = None


@dataclass
class Report:
    source: Path
    pid: str
    range: str | None
    rank: str = UNKNOWN
    rank_from: str = "-"
    role: str = UNKNOWN
    role_from: str = "-"
    step: str = UNKNOWN
    step_from: str = "-"
    host: str = UNKNOWN

    def name(self) -> str:
        return (
            f"rank-{self.rank}_role-{self.role}_step-{self.step}_host-{self.host}"
            f"_pid-{self.pid}_range-{self.range or 'all'}.nsys-rep"
        )


def read_worker_logs(logs_dir: Path) -> dict[str, ProcessInfo]:
    """pid -> rank and actor class, from the Ray worker logs of one session (one node)."""
    infos: dict[str, ProcessInfo] = {}
    for path in sorted(logs_dir.glob("worker-*")):
        match = WORKER_LOG_RE.match(path.name)
        if not match:
            continue
        info = infos.setdefault(match["pid"], ProcessInfo())
        with open(path, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if info.rank is None and (rank := RANK_RE.search(line)):
                    info.rank = rank[1]
                elif info.actor_class is None and (actor := ACTOR_RE.match(line)):
                    info.actor_class = actor[1]
    return infos


def step_labels(profile_steps: list[int], continuous: bool) -> list[str]:
    """Label of capture range n (index n-1): each step, or each run of consecutive steps."""
    steps = sorted(set(profile_steps))
    if not continuous:
        return [str(step) for step in steps]
    runs: list[list[int]] = []
    for step in steps:
        if runs and step == runs[-1][-1] + 1:
            runs[-1].append(step)
        else:
            runs.append([step])
    return [str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]


def _split_prefix(prefix: str) -> tuple[str, str]:
    """'<role>_<hostname>' or '<hostname>' (relocated without a role) -> (role, host)."""
    for role in ROLES:
        if prefix.startswith(role + "_"):
            return role, prefix[len(role) + 1 :]
    return UNKNOWN, prefix


def _session_logs(report: Path) -> Path | None:
    """<session>/logs for a report still in Ray's <session>/logs/nsight folder."""
    if report.parent.name == "nsight" and report.parent.parent.name == "logs":
        return report.parent.parent
    return None


def describe(
    path: Path,
    extra_logs: list[dict[str, ProcessInfo]],
    own_logs: dict[Path, dict[str, ProcessInfo]],
    labels: list[str] | None,
    notes: list[str],
) -> Report | None:
    """The recovered fields of one report, or None when its name follows neither naming pattern."""
    match = REPORT_RE.match(path.name)
    if not match:
        return None
    report = Report(source=path, pid=match["pid"], range=match["range"])
    if match["prefix"]:
        report.role, report.host = _split_prefix(match["prefix"])
        report.role_from = "file name" if report.role != UNKNOWN else "-"

    session = _session_logs(path)
    if session is not None:
        if session not in own_logs:
            own_logs[session] = read_worker_logs(session)
        candidates = [own_logs[session].get(report.pid)]
    else:
        candidates = [logs.get(report.pid) for logs in extra_logs]
    found = [info for info in candidates if info is not None]
    ranks = {info.rank for info in found if info.rank is not None}
    if len(ranks) == 1:
        report.rank, report.rank_from = ranks.pop(), "worker log"
    elif len(ranks) > 1:
        notes.append(f"{path}: pid {report.pid} has ranks {sorted(ranks)} in different --ray-logs dirs; rank left unknown")
    if any(info.actor_class in CONTROLLER_CLASSES for info in found) and report.role == UNKNOWN:
        report.role, report.role_from = "controller", "worker log"

    if report.range is None and report.role == "controller":
        report.step, report.step_from = "all", "controller report has no capture range"
    elif report.range is not None and labels is not None:
        index = int(report.range) - 1
        if 0 <= index < len(labels):
            report.step, report.step_from = labels[index], "--profile-steps"
        else:
            notes.append(f"{path}: capture range {report.range}, --profile-steps gives {len(labels)}; step left unknown")
    return report


def collect(
    roots: list[Path], dest: Path, ray_logs: list[Path], labels: list[str] | None
) -> tuple[list[list[str]], list[str]]:
    """Copy every report under the roots into dest with its new name; returns manifest rows and notes."""
    for root in roots:
        if not root.is_dir():
            raise CollectError(f"{root}: no such directory")
    if dest.exists() and any(dest.iterdir()):
        raise CollectError(f"{dest}: destination is not empty; give a new or empty folder")
    for logs in ray_logs:
        if not logs.is_dir():
            raise CollectError(f"--ray-logs {logs}: no such directory")
    sources = sorted({path.resolve(): path for root in roots for path in root.rglob("*.nsys-rep")}.values())
    if not sources:
        where = ", ".join(map(str, roots))
        raise CollectError(
            f"{where}: no *.nsys-rep file below (Ray writes <session>/logs/nsight,"
            " verl relocates to global_profiler.save_path)"
        )

    notes = [f"{path}: unfinished nsys output (.qdstrm), no report yet" for root in roots for path in sorted(root.rglob("*.qdstrm"))]
    extra_logs = [read_worker_logs(logs) for logs in ray_logs]
    own_logs: dict[Path, dict[str, ProcessInfo]] = {}
    dest.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in sources:
        report = describe(path, extra_logs, own_logs, labels, notes)
        name = report.name() if report else f"unparsed_{path.name}"
        target = dest / name
        copy = 2
        while target.exists():  # the same pid, range and unknown fields twice, e.g. two nodes
            target = dest / f"{Path(name).stem}_dup{copy}.nsys-rep"
            copy += 1
        shutil.copy2(path, target)
        if report:
            fields = [report.rank, report.rank_from, report.role, report.role_from, report.step, report.step_from]
            rows.append([target.name, str(path), *fields, report.host, report.pid, report.range or "all"])
        else:
            rows.append([target.name, str(path), *[UNKNOWN, "-"] * 3, UNKNOWN, UNKNOWN, UNKNOWN])
            notes.append(f"{path}: name is neither worker_process_<pid>[.<n>] nor a relocated one; copied as {target.name}")
    return rows, notes


MANIFEST_HEADER = ["name", "source", "rank", "rank_from", "role", "role_from", "step", "step_from", "host", "pid", "range"]


def parse_steps(text: str) -> list[int]:
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CollectError(f"--profile-steps {text!r}: expected comma-separated step numbers, e.g. 1,2,5") from None
    if not steps:
        raise CollectError("--profile-steps is empty; give the run's global_profiler.steps, e.g. 1,2,5")
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_recipes.perf.collect_nsys", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "roots", nargs="+", metavar="root", help="a Ray session dir, global_profiler.save_path, or a folder holding copies"
    )
    parser.add_argument("dest", help="new or empty folder for the renamed reports and manifest.tsv")
    parser.add_argument("--ray-logs", action="append", default=[], help="<session>/logs of a node, for reports outside it (repeatable)")
    parser.add_argument("--profile-steps", help="the run's global_profiler.steps, e.g. 1,2,5 (whole-step ranges only)")
    parser.add_argument("--continuous", action="store_true", help="the run set global_profiler.profile_continuous_steps=True")
    args = parser.parse_args(argv)
    try:
        if args.continuous and not args.profile_steps:
            raise CollectError("--continuous needs --profile-steps")
        labels = step_labels(parse_steps(args.profile_steps), args.continuous) if args.profile_steps else None
        dest = Path(args.dest)
        rows, notes = collect([Path(root) for root in args.roots], dest, [Path(p) for p in args.ray_logs], labels)
    except CollectError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    (dest / "manifest.tsv").write_text("\n".join("\t".join(row) for row in [MANIFEST_HEADER, *rows]) + "\n")
    for row in rows:
        print(f"{row[0]}  <-  {row[1]}")
    print(f"\n{len(rows)} report(s) copied to {dest}; fields and their origin in {dest / 'manifest.tsv'}")
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU-busy time per top-level NVTX range of one Nsight Systems report of a verl 0.9.1 worker.

    python -m verl_recipes.perf.nsys_summary <report.nsys-rep | exported.sqlite> [--range NAME ...]

A .nsys-rep is first exported with `nsys export --type sqlite` (nsys must be on PATH); a .sqlite
made that way elsewhere is read directly. verl 0.9.1's worker ranges are `actor_update`,
`actor_compute_log_prob`, `ref_compute_log_prob` (ActorRolloutRefWorker) and `train_batch`
(TrainingWorker, also nested inside `actor_update`); the controller's are its stage timers (`gen`,
`old_log_prob`, `update_actor`, ... inside `step`). Rollout on vLLM/SGLang is not traced by nsys.

Tables and columns read (nsys SQLite export schema):
- NVTX_EVENTS(start, end, eventType, text, textId -> StringIds.id, globalTid): ranges are
  eventType 59 (push/pop) and 60 (start/end) with an end; the name is `text`, or the registered
  string `textId` (the `nvtx` package registers its messages).
- CUPTI_ACTIVITY_KIND_KERNEL(start, end, correlationId, globalPid): GPU kernel executions.
- CUPTI_ACTIVITY_KIND_RUNTIME(start, correlationId, globalTid), when present: the launching call.
- pid = globalTid (or globalPid) / 0x1000000 % 0x1000000, as in NVIDIA's documented queries.

Assumptions: a kernel belongs to a range when the runtime call that launched it started inside the
range, in the same process (any thread: autograd's backward launches from its own thread). Without
the runtime table a kernel belongs to the range its execution started in. Top-level means not
contained in another range of the same process. "busy" is the union of kernel intervals (concurrent
kernels count once), "kernel" their plain sum. CUDA-graph replays traced as whole graphs
(`cuda-graph-trace=graph`) are not in the kernel table and are not counted.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
from bisect import bisect_right
from collections import defaultdict
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from verl_recipes.perf.table import fmt, format_table

RANGE_EVENT_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
REQUIRED_TABLES = ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "StringIds")
PID_OF = "({col} / 16777216 % 16777216)"  # 0x1000000
OUTSIDE = "(outside the ranges)"
ALL = "(all kernels)"


class NsysError(ValueError):
    """The report cannot be exported or is missing the tables the summary reads."""


@dataclass
class Stage:
    name: str
    calls: int = 0
    wall_ns: int = 0
    kernel_ns: int = 0
    kernels: list[tuple[int, int]] = field(default_factory=list)

    @property
    def busy_ns(self) -> int:
        """Union of the kernel intervals."""
        busy, reach = 0, None
        for start, end in sorted(self.kernels):
            if reach is None or start > reach:
                busy += end - start
                reach = end
            elif end > reach:
                busy += end - reach
                reach = end
        return busy


def export_sqlite(report: Path) -> Path:
    """<report>.sqlite next to the report, made by `nsys export` unless it is already there."""
    target = report.with_suffix(".sqlite")
    if target.is_file():
        return target
    nsys = shutil.which("nsys")
    if nsys is None:
        raise NsysError(
            f"{report}: nsys is not on PATH; run `nsys export --type sqlite --output {target} {report}`"
            " where Nsight Systems is installed and pass the .sqlite"
        )
    command = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(target), str(report)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not target.is_file():
        raise NsysError(f"{report}: `nsys export` failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}")
    return target


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _read_ranges(db: sqlite3.Connection) -> list[tuple[int, int, int, str]]:
    """(pid, start, end, name) of every closed NVTX range."""
    registered = "textId" in _columns(db, "NVTX_EVENTS")  # older exports have inline text only
    name = "COALESCE(e.text, s.value)" if registered else "e.text"
    join = "LEFT JOIN StringIds s ON s.id = e.textId" if registered else ""
    rows = db.execute(
        f"SELECT {PID_OF.format(col='e.globalTid')}, e.start, e.end, {name} FROM NVTX_EVENTS e {join} "
        f"WHERE e.eventType IN {RANGE_EVENT_TYPES} AND e.end IS NOT NULL AND e.end >= e.start"
    )
    return [(pid, start, end, text or "(unnamed)") for pid, start, end, text in rows]


def _read_kernels(db: sqlite3.Connection) -> list[tuple[int, int, int, int]]:
    """(pid, anchor time, start, end) of every kernel; anchor = its launch call's start, else its own start."""
    pid = PID_OF.format(col="k.globalPid")
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in _tables(db):
        launch_pid = PID_OF.format(col="r.globalTid")
        query = (
            f"SELECT {pid}, COALESCE(r.start, k.start), k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            f"LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId AND {launch_pid} = {pid}"
        )
    else:
        query = f"SELECT {pid}, k.start, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k"
    return list(db.execute(query))


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _top_level(ranges: list[tuple[int, int, int, str]]) -> list[tuple[int, int, int, str]]:
    """Ranges not contained in another range of the same process."""
    kept, reach = [], {}
    for pid, start, end, name in sorted(ranges, key=lambda r: (r[0], r[1], -r[2])):
        if pid in reach and end <= reach[pid]:
            continue
        kept.append((pid, start, end, name))
        reach[pid] = end
    return kept


def summarize(sqlite_path: str | Path, names: list[str] | None = None) -> list[Stage]:
    """One row per range name (top-level ranges, or every range named in `names`), then OUTSIDE and ALL."""
    sqlite_path = Path(sqlite_path)
    with closing(sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)) as db:
        try:
            missing = [table for table in REQUIRED_TABLES if table not in _tables(db)]
        except sqlite3.DatabaseError as err:
            raise NsysError(f"{sqlite_path}: not an SQLite database ({err})") from None
        if missing:
            raise NsysError(
                f"{sqlite_path}: no table {', '.join(missing)}; the report needs NVTX and CUDA kernel tracing "
                "(worker_nsight_options.trace with cuda,nvtx) and at least one kernel in the capture range"
            )
        ranges = _read_ranges(db)
        kernels = _read_kernels(db)
    chosen = [r for r in ranges if r[3] in names] if names else _top_level(ranges)
    if not chosen:
        raise NsysError(f"{sqlite_path}: no NVTX range {'named ' + ', '.join(names) if names else 'at all'} in NVTX_EVENTS")

    stages: dict[str, Stage] = {}
    by_pid: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for pid, start, end, name in chosen:
        stage = stages.setdefault(name, Stage(name))
        stage.calls += 1
        stage.wall_ns += end - start
        by_pid[pid].append((start, end, name))
    for spans in by_pid.values():
        spans.sort()
    starts = {pid: [span[0] for span in spans] for pid, spans in by_pid.items()}
    longest = {pid: max(end - start for start, end, _ in spans) for pid, spans in by_pid.items()}

    outside, every = Stage(OUTSIDE), Stage(ALL)
    for pid, anchor, start, end in kernels:
        every.kernels.append((start, end))
        owners = _owners(by_pid[pid], starts[pid], longest[pid], anchor) if pid in by_pid else set()
        for name in owners:
            stages[name].kernels.append((start, end))
        if not owners:
            outside.kernels.append((start, end))
    for stage in [*stages.values(), outside, every]:
        stage.kernel_ns = sum(end - start for start, end in stage.kernels)
    return [*sorted(stages.values(), key=lambda s: -s.wall_ns), outside, every]


def _owners(spans: list[tuple[int, int, str]], starts: list[int], longest: int, anchor: int) -> set[str]:
    """Names of the ranges of one process that contain `anchor` (ranges may overlap with --range)."""
    names = set()
    for index in range(bisect_right(starts, anchor) - 1, -1, -1):
        start, end, name = spans[index]
        if start < anchor - longest:
            break  # this and every earlier range ended before the anchor
        if anchor < end:
            names.add(name)
    return names


def format_summary(stages: list[Stage]) -> str:
    rows = []
    for stage in stages:
        wall = stage.wall_ns / 1e9 if stage.calls else None
        busy_pct = 100 * stage.busy_ns / stage.wall_ns if stage.wall_ns else None
        seconds = [fmt(wall, 3), fmt(stage.kernel_ns / 1e9, 3), fmt(stage.busy_ns / 1e9, 3)]
        rows.append([stage.name, str(stage.calls or ""), *seconds, fmt(busy_pct, 1), str(len(stage.kernels))])
    return format_table(["NVTX range", "calls", "wall s", "kernel s", "busy s", "busy %", "kernels"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_recipes.perf.nsys_summary", description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="a .nsys-rep (needs nsys) or the .sqlite `nsys export --type sqlite` made from it")
    parser.add_argument(
        "--range", action="append", dest="names", help="summarize the ranges of this name, not the top-level ones (repeatable)"
    )
    args = parser.parse_args(argv)
    path = Path(args.report)
    try:
        if not path.is_file():
            raise NsysError(f"{path}: no such file")
        sqlite_path = export_sqlite(path) if path.suffix == ".nsys-rep" else path
        stages = summarize(sqlite_path, args.names)
    except NsysError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_summary(stages))
    print("\nbusy = union of kernel intervals attributed to the range (by launch time); busy % = busy / wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())

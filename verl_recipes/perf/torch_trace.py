"""Where a torch profiler trace's time goes: GPU busy vs idle, and GPU time by phase and by kernel kind.

Reads the chrome trace that verl 0.9.1's torch profiler writes (`configs/profiling/torch_*` presets; a `.json` or
`.json.gz` from `torch.profiler.profile.export_chrome_trace`, vLLM's engine traces included). Each GPU event (kernel,
memcpy, memset) is attributed to the CPU call that launched it, through the trace's `correlation` ids, and that
call to a phase. A range (a `record_function` annotation or an operator) belongs to the first phase, in the order
given, whose prefix its name starts with; a launch goes to the first phase with a range that encloses it on the
same thread, and a launch in no phase's range to `other`.

    python -m verl_recipes.perf.torch_trace TRACE [--window train_batch] [--phase backward=autograd::engine ...]

Reported over the window (the longest range named --window, else the whole trace): wall seconds, GPU-busy seconds
(the union of GPU event intervals: overlapping streams count once) and idle seconds; per phase the GPU seconds,
the number of GPU events and the wall seconds its ranges cover; GPU seconds by kernel kind (`KINDS`); the top
kernels; and the most-timed annotations (name, count, seconds), which name the stages of a trace we did not
annotate (vLLM's model runner, for one).
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
RANGE_CATEGORIES = ("user_annotation", "cpu_op")
KINDS = (  # kernel kind: name fragments, first match wins (lower case); attention first: FlashAttention's kernels
    # are cutlass templates, so their names hold "cutlass" too
    ("attention", ("flash", "fmha", "attn", "attention")),
    ("gemm", ("gemm", "cutlass", "nvjet", "xmma", "cublas", "matmul", "splitk")),
    ("communication", ("nccl",)),
    ("memcpy/memset", ("memcpy", "memset")),
)
OTHER = "other"


class TraceError(ValueError):
    """A file that is not a torch profiler chrome trace, or a window the trace does not hold."""


@dataclass
class Phase:
    gpu_s: float = 0.0
    gpu_events: int = 0
    gpu_span_s: float = 0.0  # first start to last end of its GPU events: with gpu_s, its busy and idle GPU time
    ranges: int = 0  # how many ranges of the phase the window holds (e.g. engine iterations)
    range_s: float = 0.0  # wall seconds covered by the phase's ranges (on any thread), within the window


@dataclass
class TraceSummary:
    wall_s: float
    busy_s: float
    gpu_events: int
    phases: dict[str, Phase]
    kinds: dict[str, float]
    top_kernels: list[tuple[str, int, float]]  # name, count, seconds
    annotations: list[tuple[str, int, float]]  # name, count, seconds
    unattributed_launches: int = 0  # GPU events whose launching call is not in the trace
    notes: list[str] = field(default_factory=list)

    @property
    def idle_s(self) -> float:
        return self.wall_s - self.busy_s

    @property
    def busy_fraction(self) -> float:
        return self.busy_s / self.wall_s if self.wall_s else 0.0

    def as_dict(self) -> dict:
        return {
            "wall_s": self.wall_s,
            "busy_s": self.busy_s,
            "idle_s": self.idle_s,
            "busy_fraction": self.busy_fraction,
            "gpu_events": self.gpu_events,
            "phases": {name: vars(phase) for name, phase in self.phases.items()},
            "kinds": self.kinds,
            "top_kernels": self.top_kernels,
            "annotations": self.annotations,
            "unattributed_launches": self.unattributed_launches,
            "notes": self.notes,
        }


def read_events(path: str | Path) -> list[dict]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as handle:
            trace = json.load(handle)
    except (OSError, json.JSONDecodeError, EOFError) as err:
        raise TraceError(f"{path}: not a readable chrome trace ({err})") from None
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise TraceError(f"{path}: no 'traceEvents' list; is this a torch profiler trace?")
    return [event for event in events if event.get("ph") == "X" and "dur" in event]


def kind_of(name: str) -> str:
    lowered = name.lower()
    for kind, fragments in KINDS:
        if any(fragment in lowered for fragment in fragments):
            return kind
    return OTHER


class Ranges:
    """Intervals on one thread; `covers(t)` even when they nest (a running maximum of the ends)."""

    def __init__(self, intervals: list[tuple[float, float]]):
        intervals.sort()
        self.starts = [start for start, _ in intervals]
        self.max_end, running = [], float("-inf")
        for _, end in intervals:
            running = max(running, end)
            self.max_end.append(running)

    def covers(self, time: float) -> bool:
        index = bisect.bisect_right(self.starts, time) - 1
        return index >= 0 and self.max_end[index] >= time


def union_length(intervals: list[tuple[float, float]], low: float, high: float) -> float:
    """Length of the union of the intervals, clipped to [low, high]."""
    total, reach = 0.0, low
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, high)
        if end > start:
            total += end - start
            reach = end
    return total


def window_of(events: list[dict], name: str | None) -> tuple[float, float]:
    if name:
        named = [event for event in events if event.get("name") == name and event.get("cat") in RANGE_CATEGORIES]
        if not named:
            raise TraceError(f"no range named {name!r} in the trace")
        longest = max(named, key=lambda event: event["dur"])
        return longest["ts"], longest["ts"] + longest["dur"]
    return min(event["ts"] for event in events), max(event["ts"] + event["dur"] for event in events)


def summarize(path: str | Path, phases: list[tuple[str, str]] = (), window: str | None = None, top: int = 5) -> TraceSummary:
    """phases: (name, range-name prefix) pairs, in priority order."""
    events = read_events(path)
    if not events:
        raise TraceError(f"{path}: the trace holds no timed events")
    low, high = window_of(events, window)
    inside = [event for event in events if event["ts"] + event["dur"] >= low and event["ts"] <= high]

    ranges = {name: defaultdict(list) for name, _ in phases}  # phase -> (pid, tid) -> intervals
    annotations: dict[str, list[float]] = defaultdict(list)
    launches: dict[object, tuple[object, float]] = {}  # correlation id -> ((pid, tid), launch time)
    gpu = []
    for event in inside:
        category, name = event.get("cat", ""), event.get("name", "")
        if category in GPU_CATEGORIES:
            gpu.append(event)
        elif category in ("cuda_runtime", "cuda_driver") and "correlation" in event.get("args", {}):
            launches[event["args"]["correlation"]] = ((event["pid"], event["tid"]), event["ts"])
        elif category in RANGE_CATEGORIES:
            phase = next((phase for phase, prefix in phases if name.startswith(prefix)), None)  # the first that fits
            if phase:
                ranges[phase][(event["pid"], event["tid"])].append((event["ts"], event["ts"] + event["dur"]))
            if category == "user_annotation":
                annotations[name].append(event["dur"])

    covering = {phase: {thread: Ranges(list(spans)) for thread, spans in by_thread.items()} for phase, by_thread in ranges.items()}
    summary_phases = {name: Phase() for name, _ in phases}
    summary_phases[OTHER] = Phase()
    kinds, kernels, unattributed = Counter(), defaultdict(lambda: [0, 0.0]), 0
    spans = defaultdict(lambda: [float("inf"), float("-inf")])
    for event in gpu:
        seconds = event["dur"] / 1e6
        launch = launches.get(event.get("args", {}).get("correlation"))
        phase = OTHER
        if launch is None:
            unattributed += 1
        else:
            thread, time = launch
            phase = next((name for name, _ in phases if thread in covering[name] and covering[name][thread].covers(time)), OTHER)
        summary_phases[phase].gpu_s += seconds
        summary_phases[phase].gpu_events += 1
        span = spans[phase]
        span[0], span[1] = min(span[0], event["ts"]), max(span[1], event["ts"] + event["dur"])
        kind = "memcpy/memset" if event["cat"] != "kernel" else kind_of(event.get("name", ""))
        kinds[kind] += seconds
        kernels[event.get("name", "")][0] += 1
        kernels[event.get("name", "")][1] += seconds
    for phase, (first, last) in spans.items():
        summary_phases[phase].gpu_span_s = (last - first) / 1e6
    for phase, by_thread in ranges.items():
        intervals = [span for thread_spans in by_thread.values() for span in thread_spans]
        summary_phases[phase].ranges = len(intervals)
        summary_phases[phase].range_s = union_length(intervals, low, high) / 1e6

    busy = union_length([(event["ts"], event["ts"] + event["dur"]) for event in gpu], low, high) / 1e6
    notes = [] if gpu else ["no GPU events in the window: a CPU-only run, or a trace without the cuda activity"]
    ranked = sorted(kernels.items(), key=lambda item: -item[1][1])[:top]
    timed = sorted(annotations.items(), key=lambda item: -sum(item[1]))[: 2 * top]
    return TraceSummary(
        wall_s=(high - low) / 1e6,
        busy_s=busy,
        gpu_events=len(gpu),
        phases=summary_phases,
        kinds=dict(kinds.most_common()),
        top_kernels=[(name, count, seconds) for name, (count, seconds) in ranked],
        annotations=[(name, len(durations), sum(durations) / 1e6) for name, durations in timed],
        unattributed_launches=unattributed,
        notes=notes,
    )


def format_summary(summary: TraceSummary) -> str:
    lines = [
        f"window {summary.wall_s:.3f} s: GPU busy {summary.busy_s:.3f} s ({summary.busy_fraction:.0%}), "
        f"idle {summary.idle_s:.3f} s, {summary.gpu_events} GPU events",
        "phase: GPU s / GPU events / GPU span s / ranges / range s",
    ]
    lines += [f"  {name}: {p.gpu_s:.3f} / {p.gpu_events} / {p.gpu_span_s:.3f} / {p.ranges} / {p.range_s:.3f}"
              for name, p in summary.phases.items()]
    lines.append("GPU s by kind: " + ", ".join(f"{kind} {seconds:.3f}" for kind, seconds in summary.kinds.items()))
    lines.append("top kernels (count, s):")
    lines += [f"  {count:>7} {seconds:8.3f}  {name[:100]}" for name, count, seconds in summary.top_kernels]
    lines.append("most-timed annotations (count, s):")
    lines += [f"  {count:>7} {seconds:8.3f}  {name[:100]}" for name, count, seconds in summary.annotations]
    lines += [f"note: {note}" for note in summary.notes]
    return "\n".join(lines)


def parse_phase(text: str) -> tuple[str, str]:
    name, sep, prefix = text.partition("=")
    if not sep or not name or not prefix:
        raise argparse.ArgumentTypeError(f"--phase takes NAME=PREFIX, got {text!r}")
    return name, prefix


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="a torch profiler chrome trace (.json or .json.gz)")
    parser.add_argument("--window", help="the range to measure over (e.g. train_batch); default: the whole trace")
    parser.add_argument("--phase", action="append", type=parse_phase, default=[], help="NAME=PREFIX, in priority order")
    args = parser.parse_args(argv)
    try:
        print(format_summary(summarize(args.trace, args.phase, args.window)))
    except TraceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

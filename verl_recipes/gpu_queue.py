"""Jobs laid out over a lent host's GPUs for tests/gpu/side_by_side.sh, by how long each is expected to take.

Each job, in the order given, goes to the lanes free first (a lane is a GPU, or "0.a", "0.b" when GPUs carry
several); a job of n GPUs takes lanes of n different GPUs. side_by_side.sh starts the jobs that queue behind nothing
`stagger_s` apart and a queued one ("+") when the latest jobs on its lanes end, so the last end is the seconds the
queue needs: a launcher refuses a deadline shorter than that instead of letting side_by_side.sh kill its last jobs.
Used by tests/gpu/learn_reruns.py and tests/gpu/faults.py.
"""

from __future__ import annotations

import string
from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    name: str
    command: str
    seconds: float  # expected, start-up included
    gpus: int = 1


@dataclass(frozen=True)
class Placed:
    job: Job
    lanes: tuple[str, ...]
    start: float  # expected seconds after the queue starts
    queued: bool  # behind an earlier job on one of its lanes

    @property
    def end(self) -> float:
        return self.start + self.job.seconds

    def line(self) -> str:
        """The job as side_by_side.sh reads it: "[+]LANES NAME command args..."."""
        return f"{'+' if self.queued else ''}{','.join(self.lanes)} {self.job.name} {self.job.command}"

    def planned(self) -> str:
        """The line with its expected start and length, as a launcher's --dry-run prints it."""
        return f"{self.line()}    # starts ~{self.start:.0f} s, ~{self.job.seconds:.0f} s"


def lane_names(gpus: int, lanes: int) -> list[str]:
    return [str(g) if lanes == 1 else f"{g}.{string.ascii_lowercase[lane]}" for lane in range(lanes) for g in range(gpus)]


def lay_out(jobs: list[Job], gpus: int, stagger_s: float, lanes: int = 1) -> list[Placed]:
    names = lane_names(gpus, lanes)  # every GPU's first lane, then every GPU's second: spread before doubling up
    free = dict.fromkeys(names, 0.0)
    used: set[str] = set()
    placed, unqueued = [], 0
    for job in jobs:
        if job.gpus > gpus:
            raise ValueError(f"{job.name} needs {job.gpus} GPUs, the machine has {gpus}")
        chosen: list[str] = []
        for lane in sorted(names, key=free.get):  # a stable sort: ties keep the spreading order of `names`
            if lane.split(".")[0] not in {c.split(".")[0] for c in chosen}:
                chosen.append(lane)
            if len(chosen) == job.gpus:
                break
        queued = bool(used.intersection(chosen))
        start = max(free[c] for c in chosen) if queued else unqueued * stagger_s
        unqueued += not queued
        for c in chosen:
            free[c] = start + job.seconds
        used.update(chosen)
        placed.append(Placed(job, tuple(sorted(chosen)), start, queued))
    return placed


def finish_s(placed: list[Placed]) -> float:
    """When the last job is expected to end."""
    return max((p.end for p in placed), default=0.0)

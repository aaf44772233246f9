"""vLLM's preemptions, printed for the node runs' record (verl_recipes/node/record.py reads them from the run's log).

vLLM v1 counts the requests it preempts for want of KV cache (IterationStats.num_preempted_reqs) but logs no line for
them, and its stats loggers see the count only with rollout.disable_log_stats=False, which the node runs set. With
PREEMPTIONS_ENV=1, each of vLLM's LoggingStatLogger adds the count up and prints LINE whenever it grows; `total` sums
the last count of every engine in a log. The patch says so (COUNTING) or why it could not, so a log without counts
reads as no preemptions only where they were counted.

verl loads this module in every process (the `verl.plugins` entry point in pyproject.toml), the vLLM server that
holds the stats loggers included; without the variable it does nothing.
"""

from __future__ import annotations

import os
import re

from verl_recipes.runtime.after_import import after_import

PREEMPTIONS_ENV = "VERL_RECIPES_VLLM_PREEMPTIONS"
MODULE = "vllm.v1.metrics.loggers"
LINE = "[verl_recipes] vLLM preemptions: engine {engine} pid {pid} total {total}"
PATTERN = re.compile(r"\[verl_recipes\] vLLM preemptions: engine (\d+) pid (\d+) total (\d+)")
COUNTING = "[verl_recipes] vLLM preemptions: counting in pid {pid}"
NOT_COUNTING = "[verl_recipes] vLLM preemptions: not counted: {why}"
MARK = "_counts_preemptions"


def counting(record):
    """LoggingStatLogger.record that adds up the iteration stats' preemptions (their signature varies by vLLM
    version: the IterationStats is found among the arguments)."""

    def wrapped(self, *args, **kwargs):
        stats = next((a for a in [*args, *kwargs.values()] if type(a).__name__ == "IterationStats"), None)
        if stats is not None and stats.num_preempted_reqs:
            self._preemptions = getattr(self, "_preemptions", 0) + stats.num_preempted_reqs
            print(LINE.format(engine=getattr(self, "engine_index", 0), pid=os.getpid(), total=self._preemptions),
                  flush=True)
        return record(self, *args, **kwargs)

    setattr(wrapped, MARK, True)
    return wrapped


def patch(module) -> None:
    """Count with vLLM's LoggingStatLogger; a vLLM without it is said in the log, and the run goes on."""
    cls = getattr(module, "LoggingStatLogger", None)
    if cls is None or not hasattr(cls, "record"):
        print(NOT_COUNTING.format(why=f"{module.__name__} has no LoggingStatLogger.record"), flush=True)
        return
    if not hasattr(cls.record, MARK):
        cls.record = counting(cls.record)
    print(COUNTING.format(pid=os.getpid()), flush=True)


def total(log: str) -> int | None:
    """Preemptions of every engine in a run's log: the last count each (engine, process) printed, summed; None where
    the log shows no counting."""
    if COUNTING.format(pid="") not in log:
        return None
    last = {}
    for engine, pid, count in PATTERN.findall(log):
        last[(engine, pid)] = max(last.get((engine, pid), 0), int(count))
    return sum(last.values())


if os.environ.get(PREEMPTIONS_ENV):
    after_import(MODULE, patch)

"""Read the JSONL that verl 0.9.1's `file` logger writes (`trainer.logger=[console,file]`).

`verl.utils.tracking.FileLogger` writes one line per `Tracking.log(data, step)` call:

    {"step": <int>, "data": {"<flat metric key>": <number or null>, ...}}

to `$VERL_FILE_LOGGER_PATH` or, when that is unset, to
`$VERL_FILE_LOGGER_ROOT` (default ".") `/<trainer.project_name>/<trainer.experiment_name>.jsonl`.
It opens the file with mode "wb", so a resumed run that reuses the path starts it anew. orjson writes
NaN as null. The V1 trainer logs one line per training step (with `timing_s/step`) and, with
`val_before_train`, one validation-only line at the starting step; only training lines are kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

STEP_KEY = "timing_s/step"


class MetricsLogError(ValueError):
    """The metrics file is missing or is not what verl's file logger writes."""


@dataclass
class MetricsLog:
    steps: dict[int, dict]  # training step -> its metrics, in step order
    notes: list[str] = field(default_factory=list)


def _parse_line(path: Path, lineno: int, text: str) -> tuple[int, dict]:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise MetricsLogError(f"{path}:{lineno}: not valid JSON ({err.msg}); verl's file logger writes one JSON object per line") from None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("step"), int)
        or isinstance(record.get("step"), bool)
        or not isinstance(record.get("data"), dict)
    ):
        shape = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise MetricsLogError(
            f'{path}:{lineno}: expected {{"step": <int>, "data": {{...}}}} as verl\'s file logger writes, got {shape}'
        )
    return record["step"], record["data"]


def read_metrics_log(path: str | Path) -> MetricsLog:
    """Training steps of a verl file-logger JSONL; a clear MetricsLogError names the file and line otherwise."""
    path = Path(path)
    if not path.is_file():
        raise MetricsLogError(
            f"{path}: no such file (verl's file logger writes $VERL_FILE_LOGGER_PATH"
            " or <root>/<project>/<experiment>.jsonl)"
        )
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise MetricsLogError(f"{path}: file is empty; did the run log at least one step with trainer.logger including 'file'?")

    steps: dict[int, dict] = {}
    notes: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        step, data = _parse_line(path, lineno, line)
        if value(data, STEP_KEY) is None:
            continue  # e.g. the validation-only line logged before training
        if step in steps:
            notes.append(f"step {step} is logged more than once; line {lineno} (the last) is used")
        steps[step] = data
    if not steps:
        raise MetricsLogError(f"{path}: no line has '{STEP_KEY}'; this does not look like training metrics from verl's file logger")
    return MetricsLog(steps=dict(sorted(steps.items())), notes=notes)


def parse_step_range(text: str) -> tuple[int | None, int | None]:
    """'a:b' -> (a, b), both inclusive; either end may be empty ('3:' or ':5')."""
    first, sep, last = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return (int(first) if first.strip() else None, int(last) if last.strip() else None)
    except ValueError:
        raise MetricsLogError(
            f"--steps {text!r}: expected 'a:b' with integer step numbers, either end optional (e.g. 2:5, 3:, :4)"
        ) from None


def select_steps(log: MetricsLog, step_range: tuple[int | None, int | None]) -> dict[int, dict]:
    """The steps inside the inclusive range; an error names the steps the log has when none match."""
    first, last = step_range
    chosen = {
        step: data
        for step, data in log.steps.items()
        if (first is None or step >= first) and (last is None or step <= last)
    }
    if not chosen:
        have = list(log.steps)
        raise MetricsLogError(f"--steps {first}:{last} selects no logged step; the log has steps {have[0]}..{have[-1]}")
    return chosen


def value(data: dict, *keys: str) -> float | None:
    """The first of `keys` present with a number; null and NaN count as absent."""
    for key in keys:
        number = data.get(key)
        if isinstance(number, (int, float)) and not isinstance(number, bool) and number == number:
            return float(number)
    return None

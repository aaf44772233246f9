"""Per-stage performance report of a verl 0.9.1 run, from the JSONL of its `file` logger.

    python -m verl_recipes.perf.report <metrics.jsonl> [--steps a:b] [--png OUT.png]
                                  [--rollout-dir <trainer.rollout_data_dir> [--tokenizer <model dir>]]

Prints per-step stage seconds (other = timing_s/step minus the shown stages), MFU and throughput,
the response-length tail, and notes naming every metric it looked for and did not find.
Run with `trainer.logger=[console,file]` and `VERL_FILE_LOGGER_PATH=<file>` to get the input.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from verl_recipes.perf.metrics_log import MetricsLogError, parse_step_range, read_metrics_log, select_steps, value
from verl_recipes.perf.rollout_lengths import RolloutDirError, RolloutLengths, read_rollout_lengths
from verl_recipes.perf.stages import OUTSIDE_STEP, Stage, StepStages, step_stages
from verl_recipes.perf.table import MISSING, fmt, format_table


@dataclass(frozen=True)
class Column:
    label: str
    keys: tuple[str, ...]  # first present key wins (V1 name first, then the legacy one)
    scale: float = 1.0
    digits: int = 2

    def read(self, data: dict) -> float | None:
        number = value(data, *self.keys)
        return None if number is None else number * self.scale


PERF_COLUMNS = (
    Column("MFU %", ("perf/mfu/actor",), 100, 1),
    Column("tok/s/GPU", ("perf/throughput",), 1, 0),
)
TAIL_COLUMNS = (
    Column("resp mean", ("response_length/mean",), 1, 0),
    Column("resp max", ("response_length/max",), 1, 0),
    Column("clip %", ("response_length/clip_ratio",), 100, 1),
    Column("aborted %", ("response/aborted_ratio",), 100, 1),
    Column("prompt mean", ("prompt_length/mean",), 1, 0),
    Column("gen ms/tok", ("timing_per_token_ms/gen",), 1, 4),
    Column("DP ktok min", ("global_seqlen/balanced_min",), 1e-3, 0),
    Column("DP ktok max", ("global_seqlen/balanced_max",), 1e-3, 0),
    Column("peak mem GB", ("actor/perf/max_memory_allocated_gb", "perf/max_memory_allocated_gb"), 1, 1),
)
# Written by the legacy (trainer.use_v1=false) agent-loop path only: per-sample generate seconds.
SAMPLE_GEN_COLUMNS = (
    Column("sample gen min s", ("timing_s/agent_loop/generate_sequences/min",)),
    Column("mean s", ("timing_s/agent_loop/generate_sequences/mean",)),
    Column("max s", ("timing_s/agent_loop/generate_sequences/max",)),
    Column("slowest resp len", ("timing_s/agent_loop/slowest/response_length",), 1, 0),
)
LENGTH_KEYS = {"mean": "response_length/mean", "max": "response_length/max", "clip_ratio": "response_length/clip_ratio"}


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return mean(present) if present else None


def _note_absent(columns: tuple[Column, ...], means: list[float | None], notes: list[str]) -> None:
    for col, m in zip(columns, means):
        if m is None:
            notes.append(f"{' / '.join(col.keys)} is absent in every step (column '{col.label}' shows {MISSING})")


def _column_table(steps: dict[int, dict], columns: tuple[Column, ...], notes: list[str]) -> str:
    rows = [[str(step), *(fmt(col.read(data), col.digits) for col in columns)] for step, data in steps.items()]
    means = [_mean([col.read(data) for data in steps.values()]) for col in columns]
    rows.append(["mean", *(fmt(m, col.digits) for m, col in zip(means, columns))])
    _note_absent(columns, means, notes)
    return format_table(["step", *(col.label for col in columns)], rows)


def stage_table(steps: dict[int, dict], shown: list[Stage], rows: list[StepStages], notes: list[str]) -> str:
    headers = ["step", *(stage.name for stage in shown), "other", "step s", *(col.label for col in PERF_COLUMNS)]
    digits = [2] * (len(shown) + 2) + [col.digits for col in PERF_COLUMNS]
    table = [
        [*(row.seconds[stage.name] for stage in shown), row.other, row.total, *(col.read(data) for col in PERF_COLUMNS)]
        for row, data in zip(rows, steps.values())
    ]
    means = [_mean(list(column)) for column in zip(*table)]
    seconds_means = means[: len(shown) + 2]  # the stages, other and the step itself
    perf_means = means[len(shown) + 2 :]
    body = [[str(row.step), *(fmt(v, d) for v, d in zip(values, digits))] for row, values in zip(rows, table)]
    body.append(["mean", *(fmt(v, d) for v, d in zip(means, digits))])
    share = [None if m is None else 100 * m / seconds_means[-1] for m in seconds_means]
    body.append(["% of step", *(fmt(v, 1) for v in share), *([""] * len(PERF_COLUMNS))])
    _note_absent(PERF_COLUMNS, perf_means, notes)
    return format_table(headers, body)


def length_stats(steps: dict[int, dict]) -> list[dict]:
    return [{name: value(data, key) for name, key in LENGTH_KEYS.items()} for data in steps.values()]


def render_text(steps: dict[int, dict], lengths: RolloutLengths | None, log_notes: list[str]) -> str:
    notes = list(log_notes)
    shown, rows, stage_notes = step_stages(steps)
    notes.extend(stage_notes)
    sections = [
        "Stage seconds per step (verl timing_s/*; other = step s - sum of the stage columns)",
        stage_table(steps, shown, rows, notes),
        "",
        "Long tail: response lengths (tokens), per-token gen time, per-DP-rank token load after balancing, peak actor memory",
        _column_table(steps, TAIL_COLUMNS, notes),
        "",
    ]
    if any(key.startswith("timing_s/agent_loop/") for data in steps.values() for key in data):
        sections += ["Per-sample generate seconds (agent loop)", _column_table(steps, SAMPLE_GEN_COLUMNS, notes), ""]
    else:
        notes.append(
            "no per-rank or per-sample generate time in these metrics: verl 0.9.1's V1 trainer logs none "
            "(the legacy trainer logs timing_s/agent_loop/generate_sequences/{min,mean,max} per sample)"
        )
    if lengths is not None:
        stats = lengths.percentiles()
        sections += [
            f"Response-length distribution from the rollout dump: {len(lengths.lengths)} samples"
            f" in {lengths.files} file(s), unit {lengths.unit}",
            format_table(list(stats), [[fmt(v, 0) for v in stats.values()]]),
            "",
        ]
    else:
        notes.append(
            "per-sample lengths: pass --rollout-dir <trainer.rollout_data_dir> (and --tokenizer <model dir> for tokens)"
            " for percentiles and a histogram"
        )
    outside = sorted({key for data in steps.values() for key in OUTSIDE_STEP if key in data})
    if outside:
        notes.append(f"{', '.join(outside)} ran outside timing_s/step (V1 trainer) and is not in any column")
    sections += ["Notes:", *(f"- {note}" for note in notes)]
    return "\n".join(sections)


def png_title(steps: dict[int, dict], rows: list[StepStages]) -> str:
    mfu, throughput = (_mean([col.read(data) for data in steps.values()]) for col in PERF_COLUMNS)
    parts = [f"Stage seconds per step: mean step {mean(row.total for row in rows):.0f} s"]
    parts.append(f"MFU {mfu:.1f} %" if mfu is not None else "MFU absent")
    parts.append(f"{throughput:.0f} tok/s/GPU" if throughput is not None else "throughput absent")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_recipes.perf.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("metrics", help="JSONL written by verl's file logger (VERL_FILE_LOGGER_PATH)")
    parser.add_argument("--steps", help="inclusive step range a:b (either end optional)")
    parser.add_argument("--png", help="write a chart (stacked stage seconds, response lengths) to this PNG")
    parser.add_argument("--rollout-dir", help="trainer.rollout_data_dir of the run: per-sample lengths for percentiles and the histogram")
    parser.add_argument("--tokenizer", help="tokenizer dir (the run's model path) to count --rollout-dir lengths in tokens, not characters")
    args = parser.parse_args(argv)
    try:
        log = read_metrics_log(args.metrics)
        steps = select_steps(log, parse_step_range(args.steps)) if args.steps else log.steps
        lengths = read_rollout_lengths(args.rollout_dir, set(steps), args.tokenizer) if args.rollout_dir else None
        if args.png and not Path(args.png).parent.is_dir():
            raise MetricsLogError(f"--png {args.png}: directory {Path(args.png).parent} does not exist")
    except (MetricsLogError, RolloutDirError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(render_text(steps, lengths, log.notes))
    if args.png:
        from verl_recipes.perf.plot import render_png  # matplotlib only when a chart is asked for

        shown, rows, _ = step_stages(steps)
        render_png(args.png, shown, rows, png_title(steps, rows), length_stats(steps), lengths)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

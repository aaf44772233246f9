"""PNG of a perf report: stacked stage seconds per step, and the response-length tail."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from verl_recipes.perf.rollout_lengths import RolloutLengths
from verl_recipes.perf.stages import Stage, StepStages

PERCENTILE_STYLE = {"p50": ":", "p90": "--", "p99": "-."}
MAX_ANNOTATED_STEPS = 30  # beyond this, per-bar labels overlap


def _label_above(ax, x: float, y: float, text: str) -> None:
    ax.annotate(text, (x, y), ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")


def _step_axis(ax) -> None:
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _stage_bars(ax, shown: list[Stage], rows: list[StepStages], title: str) -> None:
    xs = [row.step for row in rows]
    bottoms = [0.0] * len(rows)
    colors = iter(matplotlib.colormaps["tab10"].colors)
    series = [(stage.name, [row.seconds[stage.name] or 0.0 for row in rows]) for stage in shown]
    series.append(("other", [max(row.other, 0.0) for row in rows]))
    for name, seconds in series:
        if not any(seconds):
            continue  # an absent stage gets no legend entry
        color = "lightgray" if name == "other" else next(colors)
        label = f"{name} ({sum(seconds) / len(seconds):.1f} s mean)"
        ax.bar(xs, seconds, bottom=bottoms, label=label, color=color, edgecolor="white", linewidth=0.5)
        bottoms = [b + s for b, s in zip(bottoms, seconds)]
    if len(rows) <= MAX_ANNOTATED_STEPS:
        for row in rows:
            _label_above(ax, row.step, row.total, f"{row.total:.0f} s")
    _step_axis(ax)
    ax.set_ylabel("seconds")
    ax.set_ylim(0, max(row.total for row in rows) * 1.1)
    ax.set_title(title, fontsize=10)
    handles, names = ax.get_legend_handles_labels()  # listed top-down, as the segments are stacked
    ax.legend(handles[::-1], names[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _length_histogram(ax, lengths: RolloutLengths) -> None:
    ax.hist(lengths.lengths, bins=60, color="tab:blue", alpha=0.8)
    stats = lengths.percentiles()
    for name, style in PERCENTILE_STYLE.items():
        ax.axvline(stats[name], color="black", linestyle=style, linewidth=1, label=f"{name} {stats[name]:.0f}")
    ax.axvline(stats["max"], color="tab:red", linewidth=1, label=f"max {stats['max']:.0f}")
    ax.set_xlabel(f"response length ({lengths.unit})")
    ax.set_ylabel("samples")
    ax.set_title(f"Response lengths: {len(lengths.lengths)} samples from {lengths.files} step dump(s)", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _length_summary(ax, steps: list[int], length_stats: list[dict]) -> None:
    """Without per-sample lengths: per-step mean and max from response_length/* metrics."""
    width = 0.4
    means = [stats["mean"] or 0.0 for stats in length_stats]
    maxes = [stats["max"] or 0.0 for stats in length_stats]
    ax.bar([x - width / 2 for x in steps], means, width, label="mean", color="tab:blue")
    ax.bar([x + width / 2 for x in steps], maxes, width, label="max", color="tab:red")
    if len(steps) <= MAX_ANNOTATED_STEPS:
        for x, stats in zip(steps, length_stats):
            if stats["clip_ratio"] is not None:
                _label_above(ax, x + width / 2, stats["max"] or 0.0, f"clip {stats['clip_ratio']:.1%}")
    _step_axis(ax)
    ax.set_ylabel("tokens")
    ax.set_ylim(0, max(maxes + [1.0]) * 1.15)
    ax.set_title("Response length per step (response_length/* metrics; pass --rollout-dir for a histogram)", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def render_png(
    out: str | Path,
    shown: list[Stage],
    rows: list[StepStages],
    stage_title: str,
    length_stats: list[dict],
    lengths: RolloutLengths | None,
) -> None:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 8.5))
    _stage_bars(top, shown, rows, stage_title)
    if lengths is not None:
        _length_histogram(bottom, lengths)
    else:
        _length_summary(bottom, [row.step for row in rows], length_stats)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)

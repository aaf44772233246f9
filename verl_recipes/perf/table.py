"""Plain-text tables for the perf command-line tools."""

from __future__ import annotations

MISSING = "-"


def fmt(value, digits: int = 2) -> str:
    """A number with fixed decimals, or MISSING for None."""
    if value is None:
        return MISSING
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """Right-aligned columns (the first left-aligned), a rule under the header."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]

    def line(cells):
        first = str(cells[0]).ljust(widths[0])
        rest = [str(cell).rjust(width) for cell, width in zip(cells[1:], widths[1:])]
        return "  ".join([first, *rest]).rstrip()

    return "\n".join([line(headers), "  ".join("-" * width for width in widths), *(line(row) for row in rows)])

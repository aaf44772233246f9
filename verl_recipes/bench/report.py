"""What every benchmark reports: the environment, a table printed last, and $OUT/<name>.json."""

import datetime
import importlib.metadata
import json
import os
import platform

import torch


def versions() -> dict:
    """Versions of the packages a result depends on (None where one is not installed)."""
    found = {"python": platform.python_version()}
    for package in ("torch", "transformers", "verl", "vllm"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def environment(cpu_dry_run: bool) -> dict:
    on_gpu = torch.cuda.is_available() and not cpu_dry_run
    return {
        "hardware": torch.cuda.get_device_name(0) if on_gpu else "cpu (dry run)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(),
    }


def table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """A fixed-width text table; columns are (key, header); floats get 3 significant digits."""

    def cell(value):
        if isinstance(value, float):
            return f"{value:.3g}"
        return "-" if value is None else str(value)

    cells = [[header for _, header in columns]] + [[cell(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(text.rjust(width) for text, width in zip(line, widths)) for line in cells)


def _plain(value):
    """numpy scalars and arrays as plain JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def write_json(name: str, payload: dict) -> str | None:
    """Write payload to $OUT/<name>.json when $OUT is set; returns the path written."""
    out_dir = os.environ.get("OUT")
    if not out_dir:
        return None
    path = os.path.join(out_dir, f"{name}.json")
    with open(path, "w") as handle:
        json.dump(payload, handle, indent=2, default=_plain)
    return path

"""Shared machinery of data preparation: dataset specs, loading sources, streaming parquet output, the run report.

A dataset is a `Spec`: the hub repositories it reads or the generators it runs (`Part`s), the files it writes, and
`Stream`s that each convert one split of one part row by row into one or more output files. `run` drives a spec: it
loads each source, converts every row (a row converter raises `BadRow` or `Skip` with a reason), writes the rows to
temporary parquet files, prints and saves a report, and renames the files into place only if the run passed.
"""

import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

REPORT_NAME = "prepare_report.json"
BATCH_ROWS = 256  # rows per parquet write: bounds memory for image datasets
SHOWN_BAD_ROWS = 20


class PrepError(Exception):
    """A problem the user must fix; the message names the dataset, source or file and what to do."""


class BadRow(Exception):
    """The row cannot be converted (missing field, unparsable answer, bad image); the message is the reason."""


class Skip(Exception):
    """The row is left out on purpose (a duplicate, an excluded subset); the message is the reason."""


@dataclass(frozen=True)
class Part:
    """One source repository on the HF hub, or rows generated here (`generate`: no hub, no network)."""

    hub_id: str  # for a generated part, what the report names as its source
    config: str | None = None
    data_files: tuple[str, ...] = ()  # files inside the repository (or the local copy) to read
    generate: Callable[[], datasets.DatasetDict] | None = None


@dataclass(frozen=True)
class Stream:
    """Converts split `split` of part `part` row by row; each row goes to `to` (a file name, or a function of
    the count of rows this stream has written so far)."""

    part: str
    split: str
    columns: tuple[str, ...]  # columns the split must have
    convert: Callable[[dict, Callable[[str], None]], dict]  # (row, note) -> output row; note(msg) counts a remark
    to: str | Callable[[int], str]
    dedupe_key: Callable[[dict], Hashable] | None = None  # output rows whose key was seen before are skipped


@dataclass(frozen=True)
class Spec:
    parts: dict[str, Part]
    files: tuple[str, ...]
    streams: tuple[Stream, ...]


@dataclass
class StreamReport:
    source: str
    read: int = 0
    written: Counter = field(default_factory=Counter)  # file -> rows
    skipped: Counter = field(default_factory=Counter)  # reason -> rows
    notes: Counter = field(default_factory=Counter)  # remark -> rows
    bad: list = field(default_factory=list)  # (row index, reason)


def text_field(row: dict, column: str) -> str:
    """The row's non-empty string in `column`, else BadRow."""
    value = row.get(column)
    if not isinstance(value, str) or not value.strip():
        raise BadRow(f"column '{column}' is {'empty' if isinstance(value, str) else type(value).__name__}")
    return value


# ------------------------------------------------------------------------------------------------ sources


def is_local(source: str) -> bool:
    return os.path.exists(source) or source.startswith(("/", ".", "~"))


def load_part(dataset: str, name: str, part: Part, source: str | None) -> datasets.DatasetDict:
    """Load a part from the hub (`source` None or a hub id) or from a local copy: a dir saved by `datasets`,
    a dir of parquet/json/jsonl files (splits named by file name, e.g. train.jsonl/test.jsonl; a `config`
    sub-dir is used when present), or a single such file (split "train")."""
    where = source or part.hub_id
    try:
        if source is None and part.generate is not None:
            return part.generate()
        if source is not None and is_local(source):
            return _load_local(dataset, name, part, Path(source).expanduser())
        return datasets.load_dataset(where, part.config, data_files=list(part.data_files) or None)
    except PrepError:
        raise
    except Exception as e:
        raise PrepError(
            f"{dataset}: cannot load part '{name}' from {where}: {type(e).__name__}: {e}\n"
            f"  Without network, download {part.hub_id} elsewhere and pass --source {name}=PATH "
            f"(a dir saved by datasets, or a dir/file of parquet/json/jsonl)."
        ) from e


def _load_local(dataset: str, name: str, part: Part, path: Path) -> datasets.DatasetDict:
    if not path.exists():
        raise PrepError(f"{dataset}: --source for part '{name}' is {path}, which does not exist")
    if path.is_file():
        builder = {".parquet": "parquet", ".json": "json", ".jsonl": "json"}.get(path.suffix)
        if builder is None:
            raise PrepError(f"{dataset}: {path} is not a .parquet, .json or .jsonl file")
        return datasets.load_dataset(builder, data_files={"train": str(path)})
    if (path / "dataset_dict.json").exists():
        return datasets.load_from_disk(str(path))
    if (path / "state.json").exists():
        return datasets.DatasetDict({"train": datasets.load_from_disk(str(path))})
    if part.config and (path / part.config).is_dir():
        path = path / part.config
    missing = [f for f in part.data_files if not (path / f).exists()]
    if missing:
        raise PrepError(f"{dataset}: {path} lacks {', '.join(missing)} (files of {part.hub_id})")
    return datasets.load_dataset(str(path), data_files=list(part.data_files) or None)


def undecoded(split: datasets.Dataset) -> datasets.Dataset:
    """Image columns as {"bytes", "path"} dicts, so images pass through without a decode/encode round trip."""
    for column, feature in split.features.items():
        if isinstance(feature, datasets.Image):
            split = split.cast_column(column, datasets.Image(decode=False))
        elif isinstance(feature, datasets.List | datasets.Sequence) and isinstance(feature.feature, datasets.Image):
            split = split.cast_column(column, datasets.List(datasets.Image(decode=False)))
    return split


# ------------------------------------------------------------------------------------------------ output


class ParquetOut:
    """Writes rows in batches to `<path>.tmp`; `commit` renames it into place, `discard` removes it.

    The first batch fixes the schema, so converters must give every row the same fields. An `images` column
    is tagged as a `datasets` list of Image (as verl's examples/data_preprocess/geo3k.py writes it), so
    readers get PIL images."""

    def __init__(self, path: Path):
        self.path = path
        self.tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        self.rows = 0
        self._batch: list[dict] = []
        self._writer: pq.ParquetWriter | None = None

    def add(self, row: dict) -> None:
        self._batch.append(row)
        self.rows += 1
        if len(self._batch) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._batch:
            return
        table = pa.Table.from_pylist(self._batch)
        self._batch = []
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.tmp, _tagged_schema(table.schema))
        try:
            table = table.cast(self._writer.schema)
        except (pa.ArrowInvalid, ValueError) as e:  # a converter produced rows of different shapes
            raise RuntimeError(f"{self.path.name}: rows changed shape: {table.schema} vs {self._writer.schema}") from e
        self._writer.write_table(table)

    def close(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()

    def commit(self) -> None:
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        self.tmp.unlink(missing_ok=True)


def _tagged_schema(schema: pa.Schema) -> pa.Schema:
    if "images" not in schema.names:
        return schema
    features = datasets.Features.from_arrow_schema(schema)
    features["images"] = datasets.List(datasets.Image())
    return features.arrow_schema


# ------------------------------------------------------------------------------------------------ run


def run(dataset: str, spec: Spec, out_dir: Path, sources: dict[str, str], force: bool, max_bad_fraction: float) -> int:
    """Prepare `dataset` into `out_dir`; returns the process exit code."""
    paths = [out_dir / name for name in spec.files]
    if not force and all(p.exists() for p in paths):
        print(f"{dataset}: already prepared ({', '.join(str(p) for p in paths)}); use --force to rebuild")
        return 0
    out_dir.mkdir(parents=True, exist_ok=True)
    outs = {name: ParquetOut(out_dir / name) for name in spec.files}
    reports: list[StreamReport] = []
    try:
        # load and check every source first, so a missing one fails before hours of conversion
        loaded = {name: load_part(dataset, name, part, sources.get(name)) for name, part in spec.parts.items()}
        splits = [_checked_split(dataset, spec.parts[s.part], loaded[s.part], s, sources) for s in spec.streams]
        for stream, split in zip(spec.streams, splits, strict=True):
            reports.append(_run_stream(stream, split, outs, _source_label(spec, stream, sources)))
        for out in outs.values():
            out.close()
    except BaseException:
        for out in outs.values():
            out.discard()
        raise
    failures = _failures(reports, outs, max_bad_fraction)
    _print_report(dataset, reports, outs, out_dir / REPORT_NAME)
    _save_report(out_dir / REPORT_NAME, dataset, reports, outs, failures)
    if failures:
        for out in outs.values():
            out.discard()
        print(f"{dataset}: FAILED, nothing written:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    for out in outs.values():
        out.commit()
    return 0


def _source_label(spec: Spec, stream: Stream, sources: dict[str, str]) -> str:
    return f"{sources.get(stream.part) or spec.parts[stream.part].hub_id} [{stream.split}]"


def _checked_split(
    dataset: str, part: Part, loaded: datasets.DatasetDict, stream: Stream, sources: dict[str, str]
) -> datasets.Dataset:
    where = sources.get(stream.part) or part.hub_id
    if stream.split not in loaded:
        raise PrepError(f"{dataset}: {where} has splits {sorted(loaded)}; expected a '{stream.split}' split")
    split = loaded[stream.split]
    missing = [c for c in stream.columns if c not in split.column_names]
    if missing:
        raise PrepError(
            f"{dataset}: {where} [{stream.split}] lacks column(s) {missing}; it has {split.column_names}. "
            f"Is --source {stream.part}=... the right dataset?"
        )
    return undecoded(split)


def _run_stream(stream: Stream, split: datasets.Dataset, outs: dict[str, ParquetOut], label: str) -> StreamReport:
    report = StreamReport(source=label)
    seen: set = set()
    for index, row in enumerate(split):
        report.read += 1
        try:
            converted = stream.convert(row, lambda remark: report.notes.update([remark]))
            if stream.dedupe_key is not None:
                key = stream.dedupe_key(converted)
                if key in seen:
                    raise Skip("duplicate of an earlier row")
                seen.add(key)
        except Skip as e:
            report.skipped[str(e)] += 1
            continue
        except BadRow as e:
            report.bad.append((index, str(e)))
            continue
        name = stream.to if isinstance(stream.to, str) else stream.to(sum(report.written.values()))
        out = outs[name]
        if "extra_info" in converted:
            position = {"split": name.removesuffix(".parquet"), "index": out.rows, "source_index": index}
            converted["extra_info"] = {**position, **converted["extra_info"]}
        out.add(converted)
        report.written[name] += 1
    return report


def _failures(reports: list[StreamReport], outs: dict[str, ParquetOut], max_bad_fraction: float) -> list[str]:
    failures = [
        f"{r.source}: {len(r.bad)} bad of {r.read} rows exceeds --max-bad-fraction {max_bad_fraction}"
        for r in reports
        if r.read and len(r.bad) / r.read > max_bad_fraction
    ]
    failures += [f"{name} would be empty" for name, out in outs.items() if out.rows == 0]
    return failures


def _print_report(dataset: str, reports: list[StreamReport], outs: dict[str, ParquetOut], report_path: Path) -> None:
    for r in reports:
        written = ", ".join(f"{n} -> {f}" for f, n in r.written.items()) or "0"
        skipped = "".join(f"; skipped {n} ({why})" for why, n in r.skipped.items())
        notes = "".join(f"; {n} x {what}" for what, n in r.notes.items())
        print(f"{dataset}: {r.source}: read {r.read}, written {written}, bad {len(r.bad)}{skipped}{notes}")
        for index, reason in r.bad[:SHOWN_BAD_ROWS]:
            print(f"  bad row {index}: {reason}")
        if len(r.bad) > SHOWN_BAD_ROWS:
            print(f"  ... {len(r.bad) - SHOWN_BAD_ROWS} more bad rows in {report_path}")
    for out in outs.values():
        print(f"{dataset}: {out.path}: {out.rows} rows")


def _save_report(
    path: Path, dataset: str, reports: list[StreamReport], outs: dict[str, ParquetOut], failures: list[str]
) -> None:
    report = {
        "dataset": dataset,
        "passed": not failures,
        "failures": failures,
        "files": {name: out.rows for name, out in outs.items()},
        "sources": [
            {
                "source": r.source,
                "read": r.read,
                "written": dict(r.written),
                "skipped": dict(r.skipped),
                "notes": dict(r.notes),
                "bad": [{"index": i, "reason": why} for i, why in r.bad],
            }
            for r in reports
        ],
    }
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(report, indent=1))
    os.replace(tmp, path)

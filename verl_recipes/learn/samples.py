"""What a learning run sampled, from verl's rollout dumps (`trainer.rollout_data_dir`: one `<step>.jsonl` a step, a
line a sample with its prompt `input`, `output`, `gts`, `score` and `uid` `<prompt>_<rollout>_<output>`).

A score curve says whether a run learned, not why it did not. Two figures do:
- zero_signal: the share of prompt groups whose samples all scored alike, per step. GRPO's advantage is zero for
  such a group, so a run whose groups are all alike has nothing left to learn from, whether right or wrong;
- examples: a few prompts' samples at the first and the last step, to read what the policy says.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

PROMPTS = 2  # prompt groups kept as examples at each of the first and last steps
CHARS = 200  # the tail of a prompt or an answer that an example keeps


def read_step(path: Path) -> dict[str, list[dict]]:
    """prompt id -> its samples, in dump order."""
    groups = defaultdict(list)
    for line in path.read_text().splitlines():
        if line.strip():
            sample = json.loads(line)
            groups[str(sample.get("uid", "")).rsplit("_", 2)[0]].append(sample)
    return dict(groups)


def zero_signal(groups: dict[str, list[dict]]) -> float:
    """The share of groups of two or more samples whose scores are all equal."""
    sized = [g for g in groups.values() if len(g) > 1]
    alike = sum(len({round(float(s["score"]), 6) for s in g}) == 1 for g in sized)
    return round(alike / len(sized), 3) if sized else float("nan")


def example(samples: list[dict]) -> dict:
    return {"prompt": samples[0]["input"][-CHARS:], "answer": samples[0].get("gts"),
            "samples": [[s["output"][-CHARS:], round(float(s["score"]), 3)] for s in samples]}


def digest(folder: Path) -> dict:
    """zero_signal per step and the first and last steps' examples; empty when verl dumped nothing."""
    steps = sorted((int(p.stem), p) for p in folder.glob("*.jsonl") if p.stem.isdigit()) if folder.is_dir() else []
    if not steps:
        return {}
    read = {step: read_step(path) for step, path in steps}
    ends = sorted({steps[0][0], steps[-1][0]})
    return {"zero_signal": {step: zero_signal(groups) for step, groups in read.items()},
            "examples": {step: [example(g) for g in list(read[step].values())[:PROMPTS]] for step in ends}}

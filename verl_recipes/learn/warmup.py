"""Stage 0 of a learning run: a short supervised warm-up that teaches the answer's format, not the answer.

Every target carries a random label (one of the task's K answers), drawn anew each time a row is seen, so the
model learns to write `\\boxed{<one of K>}` in the recipe's format while its choice stays independent of the
prompt: the run starts near 1/K correct. For a tool task the first turn calls the tool on only a fraction of the
samples (the rest answer at random), and after the tool's real reply the answer copies it: calling pays, and
RL must find that out.
"""

from __future__ import annotations

import random
from pathlib import Path

from verl_recipes.learn.tasks import Task, tool_call
from verl_recipes.smoke.teach import Examples, call_text, fit

BATCH = 16
STEPS = {"plain": 150, "tool": 600}  # a tool task also learns to copy the snippet's seed and the tool's reply


def warm_up(folder: Path, task: Task, rows: list[dict], schemas: list[dict], reply, seed: int = 0) -> dict:
    """Fine-tune the model in `folder` in place. `reply(row)` is what the task's tool answers for the row."""
    examples = Examples(folder, schemas)
    first = [examples.prompt(row) for row in rows]
    after = [examples.prompt(row, tool_call(row), reply(row)) for row in rows] if task.tool_fraction else []

    def sample(rng: random.Random) -> list[tuple[list[int], dict, list[int]]]:
        batch = []
        for _ in range(BATCH):
            i = rng.randrange(len(rows))
            if after and rng.random() < 0.5:  # after the call: copy the reply
                batch.append((*after[i], examples.target(task.answer_text(reply(rows[i])))))
            elif rng.random() < task.tool_fraction:
                batch.append((*first[i], examples.target(call_text(tool_call(rows[i])))))
            else:
                batch.append((*first[i], examples.target(task.answer_text(rng.choice(task.answers)))))
        return batch

    return fit(folder, examples, sample, STEPS["tool" if task.tool_fraction else "plain"], seed)

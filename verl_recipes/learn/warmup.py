"""Stage 0 of a learning run: a short supervised warm-up that teaches the answer's format, not the answer.

Every target carries a random label (one of the row's K choices), drawn anew each time a row is seen, so the
model learns to write `\\boxed{<one of K>}` in the recipe's format while its choice stays independent of the
prompt: the run starts near 1/K correct. A task's skill rows (neighbouring questions, e.g. the below task's
"Name the third one.") are shown with their true answers, half of the samples; a tool task's skill rows (another wording)
always call the tool. On the task's own prompts the first turn calls the tool on only a fraction of the samples (the
rest answer at random), and after the tool's real reply the answer copies it: calling pays, and RL must find that out.
A tool task shows fewer skill rows and more answers after the reply, and trains longer: both copies (the seed into the
call, the reply into the answer) must hold under sampling, or calling does not pay. Its call rate on the task's
prompts ends wherever the last updates leave it (0.07-0.51 across CPU builds, aiming at 0.25), so the run's baseline
uses the rate measured after the warm-up (verl_recipes/learn/build.py sampled_calls), not the aim, and the warm-up
goes on while the sampled calls do not copy the snippet (build.py warm).
"""

from __future__ import annotations

import random
from pathlib import Path

from verl_recipes.learn.tasks import Task, tool_call
from verl_recipes.smoke.teach import Examples, call_text, fit

BATCH = 16
# enough for a sharp format: after 150 steps a VL model's samples still strayed into stray tokens, which RL then
# amplified (CPU stand-in); a skill (reading a digit) and a tool task (copying the seed) need as many
STEPS = 600
SKILL_SHARE = 0.5  # of the samples, for a task with skill rows
# a tool task's: with 4 after-call answers in 16 the answer after the reply was still a guess after 600 steps (sampled
# or greedy) while the calls copied the seed; with ~7 it copies the reply from step 300-400 and the calls copy the seed
# from step 500-600 (CPU builds). 800 steps left seed 1's GPU build copying the seed so rarely that its run did not learn
# (seeded v2, 2026-11-27: calling on nearly every answer, right on about half); CPU builds of that seed copied it in
# 0.70 of their sampled calls after 800 steps and 0.81 after 1600 (a one-off measure, 192 samples each), hence 1600
TOOL_SKILL_SHARE, AFTER_CALL_SHARE, TOOL_STEPS = 0.4, 0.7, 1600  # after-call: of the samples that are not skill rows


def draw(task: Task, rows: list[dict], skill: list[dict], reply, rng: random.Random) -> tuple[str, int, str]:
    """One warm-up example: (prompt kind, row index, target text). Kinds: "task" (the row's prompt), "skill" (a skill
    row's prompt) and "after_call" (the row's prompt after its tool call and the tool's reply)."""
    i = rng.randrange(len(rows))
    if skill and rng.random() < (TOOL_SKILL_SHARE if task.tool_fraction else SKILL_SHARE):
        row = skill[i % len(skill)]
        # a tool task's skill is the call (copying the snippet); another task's, the true answer
        target = call_text(tool_call(row)) if task.tool_fraction else task.answer_text(row["reward_model"]["ground_truth"])
        return "skill", i % len(skill), target
    if task.tool_fraction and rng.random() < AFTER_CALL_SHARE:
        return "after_call", i, task.answer_text(reply(rows[i]))
    if rng.random() < task.tool_fraction:
        return "task", i, call_text(tool_call(rows[i]))
    return "task", i, task.answer_text(rng.choice(task.choices(rows[i])))


def warm_up(folder: Path, task: Task, rows: list[dict], schemas: list[dict], reply, seed: int = 0,
            steps: int | None = None) -> dict:
    """Fine-tune the model in `folder` in place, for `steps` (the task's default when None). `reply(row)` is what the
    task's tool answers for the row."""
    examples = Examples(folder, schemas)
    skill = task.skill_rows(len(rows), seed)
    prompts = {"task": [examples.prompt(row) for row in rows], "skill": [examples.prompt(row) for row in skill],
               "after_call": [examples.prompt(row, tool_call(row), reply(row)) for row in rows]
               if task.tool_fraction else []}

    def sample(rng: random.Random) -> list[tuple[list[int], dict, list[int]]]:
        drawn = [draw(task, rows, skill, reply, rng) for _ in range(BATCH)]
        return [(*prompts[kind][i], examples.target(text)) for kind, i, text in drawn]

    steps = steps or (TOOL_STEPS if task.tool_fraction else STEPS)
    return fit(folder, examples, sample, steps, seed, anneal=task.anneal)

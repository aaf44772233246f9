"""Learnable tasks for `make <recipe>-learn`: one per recipe family, graded by the recipe's own reward function.

Each task draws rows in the layout of the recipe's dataset (same data_source, prompt wrapper and reward_model
fields as `verl_recipes.data.prepare` writes), so the recipe's composed config reads them unchanged. A task has K
answers; the warm-up (verl_recipes/learn/warmup.py) teaches the answer's *format* with random labels, so a run
starts near 1/K correct and any gain must come through reward -> advantage -> update -> weight sync -> rollout.

- below (text GRPO, math reward): "Digits: 7 2 9 8. Which is below 5?"; one digit of 0-4 (the answer) among three
  distinct digits of 5-9, in random order. The warm-up's random label is one of the row's four digits (its choices),
  and its skill rows ask for a position in another wording ("Name the third one.") with the true digit: the model
  copies a shown digit, but not the right one, and RL must teach it which kind of digit pays. Its predecessors asked
  for a position ("Which is the third?", `digits` and `third` v1-v2) and learned in 1 of 3 reruns at best: a CPU
  stand-in of the GRPO phase showed why. RL raised the digits' *values* that happened to pay (the answer was right
  0.94 of the time when the third digit was 1 or 9, 0.03-0.07 when it was 0, 4 or 8) and plateaued near 0.4 at any lr,
  since a preference for values cannot find a position. Here a preference for values is the answer. (A single shown
  digit to copy, "Code: 7. Which is it?", did not learn at all: its warm-up had taught the question to ignore the code.)
  v2 anneals the warm-up (Task.anneal): v1's warmed models (CPU builds) named a digit the prompt did not show on
  0.28-0.61 of their samples, and RL then raised low digits whether shown or not (two of three v1 runs crawled to
  0.55-0.59).
- colour (VL, geo3k reward): the image is a square of one of K colours and the prompt text is the same for every
  row, so only the image says the answer and the merger and the language model must read it. The warm-up shows the
  task's question with random labels and another wording ("Name the colour ...", its skill rows) with the true
  ones: the model learns to read the colour, but not that the task's question asks for it; RL must teach that.
  (A 2 x 2 grid asking for one corner did not work: after the warm-up the model named a colour of the grid but the
  asked corner only 1 time in 4 even for the skill's corners; the frozen random vision tower mixes the corners.)
  Answers are the colours' numbers, which the reward compares in-process (words would go through math-verify's
  workers).
- seeded (ReTool, code sandbox): the prompt holds a snippet whose output is random.randint under a random seed;
  only the code interpreter tells the answer. The warm-up calls the tool on a fraction of the task's prompts and
  copies its reply; learning raises the share of trajectories that call it. Its skill rows ("Run this code: ...")
  always call: a call pays only when it copies the seed exactly, and copying takes many more examples than the
  task's quarter of calls gives (after 600 steps without them, 0 of 80 calls had the right seed). v2 anneals the
  warm-up as below v2 does: v1 learned in 1 of 2 runs (the other's greedy validation started at 0.25, the passing
  one's at 0.59); v2 learned on seeds 2 and 3, not on seed 1, whose warmed model copied the seed too rarely
  (2 x H200, 2026-11-27). v3 warms up twice as long (warmup.TOOL_STEPS 1600); seed 1 failed again (4 x H200):
  its GPU build copies the snippet in 0.18 of its sampled calls after 1600 steps, seeds 2 and 3's in 0.98. v4
  measures the copy after the warm-up and warms up 800 steps more while it is under 0.9 (build.py warm; seed 1's
  build: 0.27, 0.71, 1.00 after 2400, 3200, 4000 steps, results/learn/builds/), and its baseline counts a
  miscopied call as a guess after a tool round.

- sums (a pretrained model's recipe, smollm2-135m-grpo): "What is 7 + 12? Put the final answer in \\boxed{}." with a and b
  in 1..20, the recipe's own arithmetic rows (verl_recipes/data/arithmetic.py): training asks only the questions
  that its train.parquet asks, validation only its held-out ones. No tiny model and no warm-up: the
  recipe's own pretrained model starts where its pretraining left it, with its chat template, tokenizer and EOS,
  and answers in free form that the math reward must parse (learn_model: own on its card).

`shuffled=True` draws every training label at random (validation keeps the true ones): the negative control, whose
run must fail the score gate.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image

from verl_recipes.data.arithmetic import HIGH, LOW, arithmetic_row
from verl_recipes.data.dapo_math import _row as retool_row
from verl_recipes.data.geo3k import geo3k_row
from verl_recipes.data.gsm8k_math import GSM8K_BOXED
from verl_recipes.data.prompts import STEP_BY_STEP_BOXED

K = 4  # answers per task (choices per row for below): the warm-up starts near 1/K correct
ORDINALS = ("first", "second", "third", "fourth")
COLOURS = {"red": (220, 30, 30), "green": (30, 180, 30), "blue": (30, 60, 220), "yellow": (230, 210, 20)}
# 2 x 2 to 4 x 4 merged patches on Qwen2.5-VL (28 px each), drawn apart from the colour: a batch of equal-length
# sequences crashes verl 0.9.1's V1 trainer on Qwen-VL's 3-D position ids (verl issue #7899), and with one image size
# the learning run's answers, all 12 tokens by step 4, made every sequence equal (GPU, 2026-11-26)
IMAGE_SIDES = (56, 84, 112)
OPTIONS = ", ".join(f"{i} {c}" for i, c in enumerate(COLOURS, 1))
VL_QUESTION = f"<image>Which colour is the square: {OPTIONS}?"
VL_SKILL_QUESTION = f"<image>Name the colour of this picture ({OPTIONS})."
TOOL_FRACTION = 0.25  # share of warm-up prompts that call the tool


@dataclass(frozen=True)
class Task:
    name: str
    answers: tuple[str, ...]
    # bumped whenever the task's prompts, labels or warm-up change: learn.json records it, and the pass counts
    # (verl_recipes/learn/tally.py) count each version's reruns apart
    version: int = 1
    # what the warm-up writes before the answer (the recipe's format: geo3k's reward pays 0.1 for <think></think>)
    prefix: str = ""
    tool_fraction: float = 0.0
    # warm-up rows of neighbouring questions, shown with their true answers (None: the warm-up shows only the task)
    skill: Callable[[random.Random], tuple[dict, str]] | None = None
    # the warm-up's lr falls to 0 over its steps (verl_recipes/smoke/teach.py fit): a task whose skill is a copy needs
    # it. At a constant lr the below task's warmed models (CPU builds) named a shown digit on 0.39-0.72 of their
    # samples, and the runs that started below 0.6 plateaued near 0.55 (GPU, 2026-11-27): RL raised low digits the
    # prompt did not show (CPU stand-in). Annealed: 0.85-0.88, and the stand-in went 0.16 -> 0.93 by step 5 on the
    # builds that plateaued.
    anneal: bool = False

    def choices(self, row: dict) -> tuple[str, ...]:
        """The answers a format-only guess picks from for this row: the row's own choices, else the task's."""
        return tuple(row["extra_info"].get("choices", ())) or self.answers

    def rows(self, split: str, n: int, seed: int, shuffled: bool = False) -> list[dict]:
        rng = random.Random(f"{self.name}/{split}/{seed}")
        labels = random.Random(f"{self.name}/{split}/{seed}/shuffled")  # its own stream: the control's prompts are the run's
        rows = []
        for index in range(n):
            row, answer = MAKERS[self.name](rng, split)
            if shuffled and split == "train":
                answer = labels.choice(self.choices(row))
            rows.append(self.framed(row, answer, split, index))
        return rows

    def skill_rows(self, n: int, seed: int) -> list[dict]:
        rng = random.Random(f"{self.name}/skill/{seed}")
        return [self.framed(*self.skill(rng), "skill", index) for index in range(n)] if self.skill else []

    @staticmethod
    def framed(row: dict, answer: str, split: str, index: int) -> dict:
        row["reward_model"] = {"style": "rule", "ground_truth": answer}
        row["extra_info"] = {**row.get("extra_info", {}), "split": split, "index": index, "answer": answer}
        return row


    def answer_text(self, answer: str) -> str:
        return f"{self.prefix}\\boxed{{{answer}}}"


def digits_row(rng: random.Random, position: int) -> tuple[dict, str]:
    """The below task's skill row: K distinct digits of 0-9, asking for the one at `position` (0-based)."""
    digits = [str(d) for d in rng.sample(range(10), K)]
    question = f"Digits: {' '.join(digits)}. Name the {ORDINALS[position]} one. {STEP_BY_STEP_BOXED}"
    row = {"data_source": GSM8K_BOXED, "prompt": [{"role": "user", "content": question}], "ability": "math",
           "extra_info": {"choices": digits}}
    return row, digits[position]


def below_row(rng: random.Random) -> tuple[dict, str]:
    """Four distinct digits, one of them below 5 (the answer) and three of 5-9, in random order."""
    answer = rng.randrange(5)
    digits = [str(d) for d in rng.sample(range(5, 10), K - 1)]
    digits.insert(rng.randrange(K), str(answer))
    question = f"Digits: {' '.join(digits)}. Which is below 5? {STEP_BY_STEP_BOXED}"
    row = {"data_source": GSM8K_BOXED, "prompt": [{"role": "user", "content": question}], "ability": "math",
           "extra_info": {"choices": digits}}
    return row, str(answer)


def square(colour: str, side: int) -> Image.Image:
    return Image.new("RGB", (side, side), COLOURS[colour])


def colour_row(rng: random.Random, question: str = VL_QUESTION) -> tuple[dict, str]:
    number = rng.randint(1, K)
    colour, side = list(COLOURS)[number - 1], rng.choice(IMAGE_SIDES)
    row = geo3k_row({"problem": question, "answer": str(number), "images": [square(colour, side)]}, note=lambda m: None)
    return row, str(number)


def snippet(seed: int) -> str:
    return f"import random; random.seed({seed}); print(random.randint(1, {K}))"


def seeded_output(seed: int) -> str:
    """What the snippet prints: CPython's Mersenne Twister, so no model can tell it without running the code."""
    return str(random.Random(seed).randint(1, K))


def seeded_row(rng: random.Random, question: str = "What does this code print?") -> tuple[dict, str]:
    seed = rng.randint(100, 999)
    row = retool_row("math_dapo", f"{question} {snippet(seed)}", seeded_output(seed), retool=True)
    row["extra_info"]["seed"] = seed
    return row, seeded_output(seed)


# (rng, split) -> (row, answer); only the sums keep a split's questions apart (validation asks the held-out ones)
MAKERS = {"below": lambda rng, split: below_row(rng), "colour": lambda rng, split: colour_row(rng),
          "seeded": lambda rng, split: seeded_row(rng),
          "sums": lambda rng, split: arithmetic_row(rng, held_out=split != "train")}
TASKS = {
    "below": Task("below", tuple(str(d) for d in range(10)), version=2, anneal=True,
                  skill=lambda rng: digits_row(rng, rng.randrange(K))),
    "colour": Task("colour", tuple(str(d) for d in range(1, K + 1)), prefix="<think> </think> ",
                   skill=lambda rng: colour_row(rng, VL_SKILL_QUESTION)),
    "sums": Task("sums", tuple(str(n) for n in range(2 * LOW, 2 * HIGH + 1))),
    "seeded": Task("seeded", tuple(str(d) for d in range(1, K + 1)), version=4, anneal=True, tool_fraction=TOOL_FRACTION,
                   skill=lambda rng: seeded_row(rng, "Run this code:")),
}


def tool_call(row: dict) -> dict:
    """The seeded task's call: run the prompt's snippet (the code_interpreter schema's one argument)."""
    return {"name": "code_interpreter", "arguments": {"code": snippet(row["extra_info"]["seed"])}}

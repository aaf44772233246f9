"""Build a learning run's folder: a tiny random-init model of the recipe's family, its task's data, the warm-up.

    python -m verl_recipes.learn.build OUT --recipe qwen25-7b-grpo [--control shuffled]
writes OUT/model (warmed up), OUT/data/<dataset>/... in the layout `verl_recipes.data.prepare` produces (train rows
and fixed validation rows of the card's `learn_task`), and OUT/learn.json: the task, the control, the warm-up's loss
and the baseline score, the recipe's own reward function averaged over the warm-up's answer distribution. Then
`make <recipe>-learn TINY=OUT`. Runs on the GPU when there is one (seconds), else on the CPU (minutes).

A card with `learn_model: own` learns with the recipe's own pretrained model instead (prepared when missing, e.g.
from its GGUF wheel: verl_recipes/models.py): no tiny model and no warm-up; learn.json names the model, and its
baseline is the model's own score, sampled as the rollout samples, on the validation prompts.
"""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path

import pandas as pd

from verl_recipes.learn.tasks import TASKS, Task, seeded_output, tool_call

TRAIN_ROWS, VAL_ROWS = 1024, 64
# first turns sampled per validation row to measure a tool task's call rate and how often a call copies the snippet
CALL_SAMPLES = 4
# a tool task's warm-up goes on, MORE_STEPS (annealed) at a time and at most MORE_ROUNDS times, while fewer than
# COPY_MIN of its sampled calls copy the snippet: a wrong copy is a wrong answer, so calling barely pays and RL has
# little to find. Seed 1's GPU build failed seeded v2 and v3 (800 and 1600 steps) calling on nearly every answer,
# right on about half; seeds 2 and 3 learned both times (2026-11-27)
COPY_MIN, MORE_STEPS, MORE_ROUNDS = 0.9, 800, 3
# answers sampled per validation row to measure a pretrained model's baseline, and their length cap
OWN_SAMPLES, OWN_TOKENS, OWN_BATCH_ROWS = 4, 256, 64
CONTROLS = ("none", "shuffled", "stale")  # stale: the run's own data; the launch leaves the rollout's weights stale


def task_of(recipe) -> Task:
    name = recipe.card_value("learn_task")
    if name not in TASKS:
        raise SystemExit(f"{recipe.label}: its card's learn_task is {name!r}; known tasks: {', '.join(TASKS)} "
                         f"(verl_recipes/learn/tasks.py)")
    return TASKS[name]


def reply(row: dict) -> str:
    """The code interpreter's reply to the seeded snippet: what it prints."""
    return seeded_output(row["extra_info"]["seed"])


def baseline(task: Task, score, rows: list[dict], call_rate: float | None = None, copied: float = 1.0) -> float:
    """The expected score of the warm-up's policy under the recipe's reward `score`: a uniform guess over the K
    choices of each row, or, for a tool task, the tool's answer on the share of samples that call it (`call_rate`,
    measured after the warm-up; the task's tool_fraction when not given): right where the call copied the snippet
    (`copied` of the calls), else a guess after a tool round."""
    # a generous time bound where the reward takes one: a busy machine must not turn a right answer into a timeout
    bound = {"timeout_s": 60} if "timeout_s" in inspect.signature(score).parameters else {}

    def graded(row: dict, answer: str, turns: int) -> float:
        extra = {**row["extra_info"], "num_turns": turns}
        result = score(row["data_source"], task.answer_text(answer), row["reward_model"]["ground_truth"], extra, **bound)
        return float(result["score"] if isinstance(result, dict) else result)

    def guessed(turns: int) -> float:  # a uniform guess over each row's choices
        return sum(sum(graded(row, a, turns) for a in task.choices(row)) / len(task.choices(row)) for row in rows) / len(rows)

    guess = guessed(2)
    if not task.tool_fraction:
        return guess
    right = sum(graded(row, reply(row), 4) for row in rows) / len(rows)
    rate = task.tool_fraction if call_rate is None else call_rate
    return rate * (copied * right + (1 - copied) * guessed(4)) + (1 - rate) * guess


def sampled_calls(folder: Path, schemas: list[dict], rows: list[dict], expected, seed: int) -> dict:
    """First turns sampled as the rollout samples them (temperature 1, no top-k/p), read by verl's hermes parser:
    `rate`, the share that call a tool, and `copied`, the share of those calls that are exactly `expected(row)`. The
    warm-up aims at a call rate, but a tiny model's rate moves with its last updates (CPU builds of one mix ended at
    0.07 and 0.45), and its copy of the snippet holds in some builds and not in others."""
    import asyncio

    import torch
    from transformers import AutoModelForCausalLM
    from verl.experimental.agent_loop.tool_parser import ToolParser

    from verl_recipes.smoke.teach import Examples, call_text

    device = "cuda" if torch.cuda.is_available() else "cpu"
    examples = Examples(folder, schemas)
    parser = ToolParser.get_tool_parser("hermes", examples.tok)
    end = examples.tok.convert_tokens_to_ids("<|im_end|>")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    torch.manual_seed(seed)
    calls = copies = 0
    with torch.no_grad():
        for row in rows:
            want = expected(row)
            ids = torch.tensor([examples.prompt(row)[0]] * CALL_SAMPLES, device=device)
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                 top_k=0, top_p=1.0, max_new_tokens=len(examples.target(call_text(want))) + 4,
                                 eos_token_id=end, pad_token_id=examples.tok.pad_token_id)
            for sample in out[:, ids.shape[1]:].tolist():
                _, found = asyncio.run(parser.extract_tool_calls(sample))
                calls += bool(found)
                copies += [(c.name, json.loads(c.arguments)) for c in found] == [(want["name"], want["arguments"])]
    return {"rate": calls / (CALL_SAMPLES * len(rows)), "copied": copies / calls if calls else 0.0}


def warm(model: Path, task: Task, train: list[dict], val: list[dict], schemas: list[dict], seed: int) -> dict:
    """The warm-up (verl_recipes/learn/warmup.py); for a tool task, its sampled calls after each round, and more rounds
    while the calls do not copy the snippet."""
    from verl_recipes.learn.warmup import warm_up

    record = warm_up(model, task, train, schemas, reply, seed)
    if not task.tool_fraction:
        return record
    calls = [sampled_calls(model, schemas, val, tool_call, seed)]
    while calls[-1]["copied"] < COPY_MIN and len(calls) <= MORE_ROUNDS:
        more = warm_up(model, task, train, schemas, reply, seed + len(calls), steps=MORE_STEPS)
        record = {**record, "steps": record["steps"] + more["steps"], "last_loss": more["last_loss"]}
        calls.append(sampled_calls(model, schemas, val, tool_call, seed))
    return {**record, "calls": [{k: round(v, 4) for k, v in c.items()} for c in calls]}


def sampled_score(model_dir: Path, task: Task, score, rows: list[dict], seed: int) -> float:
    """A pretrained model's mean score under the recipe's reward `score` when it samples as the rollout does
    (its chat template, temperature 1, no top-k/p), OWN_SAMPLES answers a row. The rows go OWN_BATCH_ROWS at a time,
    left-padded: one row a call took SmolLM2's 64 rows about five minutes on an H200, 256 tokens a token at a time."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model.to(device).eval()
    torch.manual_seed(seed)
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(rows), OWN_BATCH_ROWS):
            batch = rows[start:start + OWN_BATCH_ROWS]
            prompts = [tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
                       for row in batch for _ in range(OWN_SAMPLES)]
            ids = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            out = model.generate(**ids, max_new_tokens=OWN_TOKENS, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, pad_token_id=tok.pad_token_id)
            answers = tok.batch_decode(out[:, ids["input_ids"].shape[1]:], skip_special_tokens=True)
            for number, text in enumerate(answers):
                row = batch[number // OWN_SAMPLES]
                result = score(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"])
                total += float(result["score"] if isinstance(result, dict) else result)
    return total / (OWN_SAMPLES * len(rows))


def own_model(recipe) -> Path:
    """The recipe's own model folder, prepared when missing (verl_recipes/models.py)."""
    from verl_recipes import models
    from verl_recipes.compose import compose

    path = str(compose(recipe).actor_rollout_ref.model.path)
    hub_id = models.to_prepare(path)
    return models.prepare(hub_id) if hub_id else Path(path)


def write_data(task: Task, datasets: list[str], data_dir: Path, control: str, seed: int) -> dict[str, list[dict]]:
    from verl_recipes.data.prepare import outputs

    written = {}
    for dataset in datasets:
        for path in outputs(dataset, data_dir / dataset):
            train = path.stem == "train"
            rows = task.rows("train" if train else "test", TRAIN_ROWS if train else VAL_ROWS, seed,
                             shuffled=control == "shuffled")
            path.parent.mkdir(parents=True, exist_ok=True)
            pd.DataFrame(rows).to_parquet(path)
            written[str(path)] = rows
    return written


def reward_function(recipe):
    """The recipe's own reward function (the one learn runs grade with), loaded as verl loads it."""
    from verl.utils.import_utils import load_extern_object

    from verl_recipes.learn.run import own_reward

    reward = own_reward(recipe)
    return load_extern_object(str(reward.path), str(reward.name)), f"{reward.path}:{reward.name}"


def build(recipe, out: Path, control: str = "none", seed: int = 0) -> dict:
    from verl_recipes.smoke.tiny import MODELS, recipe_tool_schemas

    task = task_of(recipe)
    if recipe.card_value("learn_model") == "own":
        return build_own(recipe, task, out, control, seed)
    family = recipe.card_value("tiny_family")
    if family not in MODELS:
        raise SystemExit(f"{recipe.label}: tiny_family {family!r} has no tiny builder (known: {', '.join(MODELS)})")
    model = MODELS[family](out / "model", seed=seed)
    written = write_data(task, recipe.card_value("data", []), out / "data", control, seed)
    train = next(rows for path, rows in written.items() if Path(path).stem == "train")
    val = next(rows for path, rows in written.items() if Path(path).stem != "train")
    schemas = recipe_tool_schemas(recipe, model)
    if task.tool_fraction and tool_call(train[0])["name"] not in {s["function"]["name"] for s in schemas}:
        raise SystemExit(f"{recipe.label}: task {task.name} calls {tool_call(train[0])['name']}, not among the "
                         f"recipe's tools {[s['function']['name'] for s in schemas]}")
    score, reward_name = reward_function(recipe)
    warmed = warm(model, task, train, val, schemas, seed)
    calls = warmed["calls"][-1] if task.tool_fraction else None
    call_rate, copied = (calls["rate"], calls["copied"]) if calls else (None, 1.0)
    info = {"recipe": recipe.label, "task": task.name, "task_version": task.version, "control": control, "seed": seed,
            "family": family, "reward": reward_name, "baseline": round(baseline(task, score, val, call_rate, copied), 4),
            **({"call_rate": call_rate, "copied": copied} if calls else {}),
            "warm_up": warmed, "files": sorted(written)}
    (out / "learn.json").write_text(json.dumps(info, indent=1))
    return info


def build_own(recipe, task: Task, out: Path, control: str, seed: int) -> dict:
    """The folder of a recipe that learns with its own pretrained model: data and learn.json, no model copy."""
    model = own_model(recipe)
    written = write_data(task, recipe.card_value("data", []), out / "data", control, seed)
    val = next(rows for path, rows in written.items() if Path(path).stem != "train")
    score, reward_name = reward_function(recipe)
    info = {"recipe": recipe.label, "task": task.name, "task_version": task.version, "control": control, "seed": seed,
            "model": str(model), "reward": reward_name,
            "baseline": round(sampled_score(model, task, score, val, seed), 4), "warm_up": None, "files": sorted(written)}
    (out / "learn.json").write_text(json.dumps(info, indent=1))
    return info


def main(argv: list[str] | None = None) -> int:
    from verl_recipes import catalog

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--recipe", required=True, help="name[/vN][:variant]; its card names the learn_task")
    parser.add_argument("--control", default="none", choices=CONTROLS,
                        help="shuffled: random training labels, the negative control that must fail the score gate; "
                             "stale: the run's data, its rollout's weights left stale, which must fail an agreement gate")
    parser.add_argument("--seed", type=int, default=0)
    ns = parser.parse_args(argv)
    info = build(catalog.parse(ns.recipe), ns.out, ns.control, ns.seed)
    print(json.dumps({k: info[k] for k in ("recipe", "task", "control", "baseline", "call_rate", "copied", "warm_up") if k in info}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

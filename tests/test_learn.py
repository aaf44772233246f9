"""Learning runs (verl_recipes/learn): task generators, the warm-up's baseline under each recipe's real reward,
the learn overlay proven against verl, and gates that pass a rising curve and fail a flat one and a control's."""

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from verl_recipes import catalog
from verl_recipes.check.gates import AGREEMENT
from verl_recipes.data.gsm8k_math import GSM8K_BOXED
from verl_recipes.learn import gates, tally
from verl_recipes.learn import run as learn_run
from verl_recipes.learn.build import baseline, reward_function, task_of
from verl_recipes.learn.tasks import COLOURS, IMAGE_SIDES, ORDINALS, TASKS, K, snippet

LEARNING = [r for r in catalog.all_recipes() if r.card_value("learn_task")]
TINY_LEARNING = [r for r in LEARNING if r.card_value("learn_model") != "own"]


def _shown(row: dict) -> list[str]:
    return row["prompt"][0]["content"].split(".")[0].removeprefix("Digits: ").split()


def test_below_rows_ask_for_the_one_digit_below_5_in_the_math_datasets_layout():
    rows = TASKS["below"].rows("train", 200, seed=0)
    for row in rows:
        digits = _shown(row)
        assert len(set(digits)) == K and [d for d in digits if int(d) < 5] == [row["reward_model"]["ground_truth"]]
        assert "Which is below 5?" in row["prompt"][0]["content"]
        assert TASKS["below"].choices(row) == tuple(digits)  # a format-only guess picks one of the shown digits
        assert row["data_source"] == GSM8K_BOXED and "\\boxed{}" in row["prompt"][0]["content"]
    assert {r["reward_model"]["ground_truth"] for r in rows} == set("01234")
    # the answer stands at every position: no position pays, only the kind of digit
    assert {_shown(r).index(r["reward_model"]["ground_truth"]) for r in rows} == set(range(K))


def test_below_skill_rows_name_every_ordinal_in_another_wording_with_the_true_digit():
    """The warm-up teaches reading and copying a shown digit, under another wording ("Name the third one.")."""
    skill = TASKS["below"].skill_rows(200, seed=0)
    asked = set()
    for row in skill:
        text = row["prompt"][0]["content"]
        ordinal = text.split("Name the ")[1].split(" one.")[0]
        assert "Which is" not in text and row["reward_model"]["ground_truth"] == _shown(row)[ORDINALS.index(ordinal)]
        asked.add(ordinal)
    assert asked == set(ORDINALS)


def test_colour_rows_say_the_answer_only_through_the_image():
    rows = TASKS["colour"].rows("test", 40, seed=0)
    assert len({r["prompt"][0]["content"] for r in rows}) == 1  # one prompt text for every row
    sides = {}
    for row in rows:
        image = Image.open(__import__("io").BytesIO(row["images"][0]["bytes"])).convert("RGB")
        answer = row["reward_model"]["ground_truth"]
        assert image.getpixel((10, 10)) == list(COLOURS.values())[int(answer) - 1]
        sides.setdefault(image.size[0], set()).add(answer)
    # sizes vary (all-equal sequence lengths crash verl's V1 trainer on Qwen-VL, verl #7899) and tell nothing
    assert set(sides) == set(IMAGE_SIDES) and all(len(answers) > 1 for answers in sides.values())
    skill = TASKS["colour"].skill_rows(20, seed=0)  # another wording, shown with true labels in the warm-up
    wordings = {s["prompt"][0]["content"] for s in skill}
    assert len(wordings) == 1 and rows[0]["prompt"][0]["content"] not in wordings


def test_seeded_answers_are_what_the_snippet_prints_when_run():
    rows = TASKS["seeded"].rows("test", 5, seed=0)
    for row in rows:
        code = snippet(row["extra_info"]["seed"])
        assert code in row["prompt"][0]["content"] and row["agent_name"] == "tool_agent"
        printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert printed.strip() == row["reward_model"]["ground_truth"]


def test_fixed_validation_and_shuffled_control_labels():
    task = TASKS["below"]
    assert task.rows("test", 20, seed=0) == task.rows("test", 20, seed=0)
    assert task.rows("test", 20, seed=0, shuffled=True) == task.rows("test", 20, seed=0)  # validation stays true
    true, shuffled = task.rows("train", 400, seed=0), task.rows("train", 400, seed=0, shuffled=True)
    assert [a["prompt"] for a in true] == [b["prompt"] for b in shuffled]  # the same prompts, other labels
    same = sum(a["reward_model"] == b["reward_model"] for a, b in zip(true, shuffled)) / len(true)
    assert 0.15 < same < 0.4  # about 1/K agree by chance
    # a shuffled label is still one of the row's shown digits: only which one is random
    assert all(b["reward_model"]["ground_truth"] in TASKS["below"].choices(b) for b in shuffled)


@pytest.mark.parametrize("name,expected", [("qwen25-7b-grpo", 1 / K), ("qwen25-vl-7b-geo3k-dapo", 0.9 / K + 0.1)])
def test_baseline_is_the_recipes_reward_of_a_uniform_guess(name, expected):
    recipe = catalog.parse(name)
    score, _ = reward_function(recipe)
    assert baseline(task_of(recipe), score, task_of(recipe).rows("test", 16, seed=0)) == pytest.approx(expected)


def test_tool_baseline_mixes_the_called_and_the_guessed_answers():
    recipe = catalog.parse("retool-qwen25-7b")
    score, name = reward_function(recipe)
    assert name.endswith("rewards.retool:compute_score")
    task = task_of(recipe)
    # the tool's answer is right (+1); a guess is right 1/K of the time (+1), else -1 without a tool round
    guess = 1 / K - (1 - 1 / K)
    assert baseline(task, score, task.rows("test", 16, seed=0)) == pytest.approx(
        task.tool_fraction + (1 - task.tool_fraction) * guess)
    # a measured call rate replaces the share the warm-up aimed at
    assert baseline(task, score, task.rows("test", 16, seed=0), call_rate=0.5) == pytest.approx(0.5 + 0.5 * guess)
    # a call that miscopies the snippet gets a wrong reply: its answer is a guess, after a tool round (+0.1 when wrong)
    after_call = 1 / K - (1 - 1 / K) * 0.9
    assert baseline(task, score, task.rows("test", 16, seed=0), call_rate=0.5, copied=0.6) == pytest.approx(
        0.5 * (0.6 + 0.4 * after_call) + 0.5 * guess)


def test_a_tool_task_warms_up_again_while_its_calls_miscopy_the_snippet(monkeypatch, tmp_path):
    from verl_recipes.learn import build, warmup

    rounds = []
    monkeypatch.setattr(warmup, "warm_up", lambda *a, steps=None, **k: rounds.append(steps) or
                        {"steps": steps or 1600, "first_loss": 7.0, "last_loss": 0.1 / len(rounds)})
    copied = iter([0.5, 0.8, 0.95, 1.0])
    monkeypatch.setattr(build, "sampled_calls", lambda *a: {"rate": 0.25, "copied": next(copied)})
    task = TASKS["seeded"]
    record = build.warm(tmp_path, task, [], [], [], seed=1)
    assert rounds == [None, build.MORE_STEPS, build.MORE_STEPS]  # stops once the copy holds
    assert record["steps"] == 1600 + 2 * build.MORE_STEPS and record["last_loss"] == pytest.approx(0.1 / 3)
    assert [c["copied"] for c in record["calls"]] == [0.5, 0.8, 0.95]
    copied = iter([0.1] * 10)
    rounds.clear()
    assert len(build.warm(tmp_path, task, [], [], [], seed=1)["calls"]) == 1 + build.MORE_ROUNDS  # and gives up
    assert "calls" not in build.warm(tmp_path, TASKS["below"], [], [], [], seed=1)  # a task without a tool


def test_every_recipe_family_has_a_learning_task():
    assert {task_of(r).name for r in LEARNING} == set(TASKS)


def _metrics(score: list[float], val: list[float], turns: list[float] | None = None, **overrides) -> dict:
    steps = {0: {"val-core/openai/gsm8k/acc/mean@1": val[0]}}
    for i, s in enumerate(score, 1):
        steps[i] = {gates.SCORE: s, "training/rollout_probs_diff_mean": 1e-4,
                    "training/rollout_actor_probs_pearson_corr": 0.9999, "rollout_corr/k3_kl": 1e-3, **overrides}
        if turns:
            steps[i][gates.TURNS] = turns[i - 1]
    steps[len(score)]["val-core/openai/gsm8k/acc/mean@1"] = val[-1]
    return steps


RISING = [0.25 + 0.5 * i / 39 for i in range(40)]
FLAT = [0.25 + 0.02 * (-1) ** i for i in range(40)]


def test_a_rising_curve_passes_every_gate():
    result = gates.evaluate(_metrics(RISING, [0.25, 0.7]), baseline=0.25, tool=False)
    assert gates.learned(result), result["gates"]


def test_a_flat_curve_fails_the_score_and_validation_gates():
    result = gates.evaluate(_metrics(FLAT, [0.25, 0.27]), baseline=0.25, tool=False)
    failed = {name for name, g in result["gates"].items() if not g["passed"]}
    assert failed == {"score over baseline", "score over start", "validation gain"}
    assert gates.score_gate_failed(result)


def test_a_shuffled_label_control_fails_the_score_gate():
    # what a control run looks like: the score hovers at 1/K, validation stays put
    rng = random.Random(0)
    control = [0.25 + rng.uniform(-0.05, 0.05) for _ in range(40)]
    assert gates.score_gate_failed(gates.evaluate(_metrics(control, [0.25, 0.23]), baseline=0.25, tool=False))


def test_a_rise_that_starts_high_is_not_enough():
    # starts already above the baseline (e.g. the warm-up leaked answers): the gain over the start is too small
    late = [0.6 + 0.1 * i / 39 for i in range(40)]
    result = gates.evaluate(_metrics(late, [0.3, 0.7]), baseline=0.25, tool=False)
    assert result["gates"]["score over baseline"]["passed"] and not result["gates"]["score over start"]["passed"]


@pytest.mark.parametrize("metric,value", [("training/rollout_probs_diff_mean", 0.2), ("rollout_corr/k3_kl", 0.3)])
def test_train_rollout_disagreement_fails_its_gate(metric, value):
    steps = _metrics(RISING, [0.25, 0.7])
    steps[7][metric] = value  # one step out of bounds: a weight push that did not reach the rollout
    result = gates.evaluate(steps, baseline=0.25, tool=False)
    assert not result["gates"][f"agreement {metric}"]["passed"] and "steps [7]" in result["gates"][f"agreement {metric}"]["detail"]
    assert gates.agreement_failed(result) and gates.EXPECTED["stale"](result) and not gates.EXPECTED["none"](result)


def test_a_sure_policys_probability_correlation_is_reported_not_gated():
    # SmolLM2 (2026-11-27): 0.984 at a probability difference of 0.0002, its policy sure of nearly every token
    steps = _metrics(RISING, [0.25, 0.7])
    steps[7][gates.PEARSON] = 0.984
    result = gates.evaluate(steps, baseline=0.25, tool=False)
    assert gates.learned(result) and result["pearson_worst"] == 0.984
    assert not any(gates.PEARSON in name for name in result["gates"])
    assert gates.EXPECTED["stale"](result) is False  # a control whose rollout was not stale after all fails


def test_a_missing_agreement_metric_fails():
    steps = _metrics(RISING, [0.25, 0.7])
    del steps[3]["rollout_corr/k3_kl"]
    assert not gates.evaluate(steps, baseline=0.25, tool=False)["gates"]["agreement rollout_corr/k3_kl"]["passed"]


def _bypass(kl: list[float]) -> dict:
    """An async (bypass-mode) run's metrics: no recomputed old log-probs, hence no training/rollout_* metrics."""
    steps = _metrics(RISING, [0.25, 0.7])
    for step, value in zip(range(1, 41), kl):
        for metric, _, _ in AGREEMENT:
            del steps[step][metric]
        steps[step]["actor/ppo_kl"] = value
    return steps


def test_bypass_mode_agreement_reads_the_ppo_ratio_kl():
    staleness = [0.02 * (-1) ** i for i in range(40)]  # one version behind: the KL of one update, either sign
    assert gates.learned(gates.evaluate(_bypass(staleness), baseline=0.25, tool=False, bypass=True))
    # the same metrics judged as a colocated run: its agreement metrics are missing, so it fails
    assert not gates.learned(gates.evaluate(_bypass(staleness), baseline=0.25, tool=False))
    stuck = staleness[:20] + [0.2] * 20  # the rollout keeps generating with weights the trainer left behind
    result = gates.evaluate(_bypass(stuck), baseline=0.25, tool=False, bypass=True)
    assert not result["gates"]["agreement actor/ppo_kl"]["passed"] and "worst 0.2" in result["gates"]["agreement actor/ppo_kl"]["detail"]


def test_tool_gate_needs_more_turns():
    flat_turns = gates.evaluate(_metrics(RISING, [0.25, 0.7], turns=[2.5] * 40), baseline=0.25, tool=True)
    rising = gates.evaluate(_metrics(RISING, [0.25, 0.7], turns=[2.5 + 1.5 * i / 39 for i in range(40)]),
                            baseline=0.25, tool=True)
    assert not flat_turns["gates"]["tool use rises"]["passed"] and rising["gates"]["tool use rises"]["passed"]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", TINY_LEARNING, ids=lambda r: r.label)
def test_learn_config_is_proven_and_grades_with_the_recipes_own_reward(recipe, tmp_path):
    from verl_recipes.check.recipe import check
    from verl_recipes.compose import compose
    from verl_recipes.learn.run import learn_args, own_reward, seed_args
    from verl_recipes.smoke.tiny import MODELS

    MODELS[recipe.card_value("tiny_family")](tmp_path / "model")
    args = learn_args(recipe, tmp_path) + seed_args(2)
    assert check(recipe, args) == []
    cfg = compose(recipe, args)
    assert cfg.reward.custom_reward_function.path == own_reward(recipe).path != "pkg://verl_recipes.rewards.smoke"
    assert cfg.actor_rollout_ref.rollout.val_kwargs.do_sample is False and cfg.trainer.val_before_train
    assert cfg.data.seed == cfg.actor_rollout_ref.rollout.seed == 2  # a rerun's seed reaches the sampler and vLLM
    # DAPO's group filter would log the score of the kept groups only, which rises with certainty alone
    assert cfg.algorithm.filter_groups.enable is False


@pytest.mark.representative
@pytest.mark.parametrize("name, lr", [("retool-qwen25-7b", 1e-4), ("qwen25-7b-grpo", 5e-4),
                                      ("qwen25-vl-7b-geo3k-dapo", 3e-4)])
def test_a_cards_learn_args_come_last(name, lr, tmp_path):
    """The tool task's card lowers configs/learn/tiny's lr (5e-4 broke its tool call in one update on the GPU)."""
    from verl_recipes.compose import compose
    from verl_recipes.learn.run import learn_args
    from verl_recipes.smoke.tiny import MODELS

    recipe = catalog.get(name)
    MODELS[recipe.card_value("tiny_family")](tmp_path / "model")
    cfg = compose(recipe, learn_args(recipe, tmp_path))
    assert cfg.actor_rollout_ref.actor.optim.lr == lr
    if name == "retool-qwen25-7b":  # a run that fits 8 minutes
        assert cfg.trainer.total_training_steps == 14
    if name == "qwen25-vl-7b-geo3k-dapo":  # the steps its lower lr needs, paid for by a finer poll (its card)
        assert cfg.trainer.total_training_steps == 24
        assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_RECIPES_REPLAY_POLL_S == "0.2"
    # configs/learn/tiny: a step's tokens in a few micro-batches, not the tiny overlay's 9-70
    a = cfg.actor_rollout_ref
    assert (a.actor.ppo_max_token_len_per_gpu == a.rollout.log_prob_max_token_len_per_gpu
            == a.ref.log_prob_max_token_len_per_gpu == 16384)


def test_launcher_names_the_grader_packages_a_math_reward_needs():
    from verl_recipes.check.preflight import required_packages
    from verl_recipes.compose import compose

    needs = required_packages(compose(catalog.parse("qwen25-7b-grpo")))
    assert {"mathruler", "math_verify", "pylatexenc"} <= needs.keys()
    smoke = required_packages(compose(catalog.parse("qwen25-7b-grpo"), ["+configs/smoke=tiny_gpu"]))
    assert "math_verify" not in smoke  # the smoke reward grades nothing


def _drawn(name: str, n: int = 4000):
    from verl_recipes.learn.build import reply
    from verl_recipes.learn.warmup import draw

    task = TASKS[name]
    rows, skill = task.rows("train", 64, seed=0), task.skill_rows(64, seed=0)
    rng = random.Random(0)
    return task, rows, skill, [draw(task, rows, skill, reply, rng) for _ in range(n)]


def test_warm_up_labels_of_the_task_are_random_and_of_the_skill_true():
    task, rows, skill, drawn = _drawn("below")
    on_task = [(i, text) for kind, i, text in drawn if kind == "task"]
    right = sum(text == task.answer_text(rows[i]["reward_model"]["ground_truth"]) for i, text in on_task)
    assert abs(right / len(on_task) - 1 / K) < 0.04  # the asked question: no better than a guess
    assert all(text.removeprefix("\\boxed{").removesuffix("}") in task.choices(rows[i]) for i, text in on_task)
    assert "Which is below 5?" not in " ".join(skill[i]["prompt"][0]["content"] for kind, i, _ in drawn if kind == "skill")
    assert all(text == task.answer_text(skill[i]["reward_model"]["ground_truth"]) for kind, i, text in drawn if kind == "skill")


def test_warm_up_calls_the_tool_on_a_fraction_and_copies_its_reply():
    from verl_recipes.learn.build import reply

    task, rows, skill, drawn = _drawn("seeded")
    first = [text for kind, _, text in drawn if kind == "task"]
    calls = sum(text.startswith("<tool_call>") for text in first) / len(first)
    assert abs(calls - task.tool_fraction) < 0.04
    assert all(text == task.answer_text(reply(rows[i])) for kind, i, text in drawn if kind == "after_call")
    assert all(snippet(rows[i]["extra_info"]["seed"]) in text for kind, i, text in drawn
               if kind == "task" and text.startswith("<tool_call>"))
    # the skill rows (another wording of the question) always call, copying their own snippet: the copying skill
    on_skill = [(i, text) for kind, i, text in drawn if kind == "skill"]
    assert on_skill and all(snippet(skill[i]["extra_info"]["seed"]) in text for i, text in on_skill)
    assert all(s["prompt"][0]["content"].startswith("Run this code:") for s in skill)


def test_an_annealed_warm_up_ends_at_no_lr_and_the_others_stay_flat():
    from verl_recipes.smoke.teach import WARMUP, lr_scale

    steps = 600
    flat = [lr_scale(step, steps, anneal=False) for step in range(steps)]
    annealed = [lr_scale(step, steps, anneal=True) for step in range(steps)]
    assert flat[WARMUP:] == [1.0] * (steps - WARMUP) and flat[0] == annealed[0] == 1 / WARMUP
    assert annealed[-1] < 0.01 and all(a > b for a, b in zip(annealed[WARMUP:], annealed[WARMUP + 1:]))
    # the copy tasks anneal (a copy held on 0.85-0.88 of samples, 0.39-0.72 without); colour v1 passed without
    assert {name for name, task in TASKS.items() if task.anneal} == {"below", "seeded"}


def test_vl_warm_up_writes_the_geo3k_format():
    task, _, _, drawn = _drawn("colour", 200)
    assert all(text.startswith("<think> </think> \\boxed{") for _, _, text in drawn)


LEARN_WALL_S = 480  # a tiny learning run, start-up included, takes at most 8 minutes on one H100 or H200 (issue 28)
OWN_WALL_S = 900  # a pretrained model's learning run: at most 15 minutes on one GPU (issue 42)
RERUNS = 3  # a tiny learns: line rests on at least three seeds of the run and three of its control (issue 42)


def current(record: dict, task, setting: dict) -> bool:
    """Whether a record reruns `task` at its version as the card sets it now (`setting`: lr and steps; with Liger's
    kernels or without, which keep the math)."""
    return tally.math_setting(record) == (task.name, task.version, setting["lr"], setting["steps"], ())


def learns_problems(runs: list[dict], controls: list[dict], label: str, task, own: bool,
                    setting: dict) -> list[str]:
    """What keeps these records from backing a learns: line of recipe `label` with its current `task` and `setting`:
    at least RERUNS seeds of passing runs (1 for a pretrained model's own run) and as many failing shuffled controls,
    each in time; stale controls (a fault the agreement gates must catch) may be listed beside them."""
    wall, reruns = (OWN_WALL_S, 1) if own else (LEARN_WALL_S, RERUNS)
    problems = []
    shuffled = [c for c in controls if c["control"] == "shuffled"]
    if len({r.get("seed") for r in runs}) < reruns or len({c.get("seed") for c in shuffled}) < reruns:
        problems.append(f"fewer than {reruns} seeds of runs or of shuffled controls")
    for record in runs + controls:
        control = record in controls
        where = f"{record['control'] if control else 'run'} seed {record.get('seed')}"
        if record["recipe"] != label or not current(record, task, setting):
            problems.append(f"{where}: not {label}'s current task {task.name} v{task.version} at lr "
                            f"{setting['lr']:g}, {setting['steps']} steps")
        kinds = ("shuffled", "stale") if control else ("none",)
        if record["control"] not in kinds or not gates.passes(record):
            problems.append(f"{where}: not a passing {'control' if control else 'run'} under the gates in force")
        if record["wall_s"] > wall:
            problems.append(f"{where}: {record['wall_s']} s, over {wall} s")
    return problems


def test_every_learns_line_rests_on_three_passing_runs_and_three_failing_controls():
    import json
    from pathlib import Path

    for recipe in catalog.all_recipes():
        if learns := recipe.own_card_value("learns"):
            runs, controls = ([json.loads(Path(f).read_text()) for f in learns[key]] for key in ("runs", "controls"))
            assert learns_problems(runs, controls, recipe.label, task_of(recipe),
                                   recipe.card_value("learn_model") == "own", learn_run.setting(recipe)) == [], recipe.label


def test_a_learns_line_needs_three_seeds_each_passing_in_time():
    task, setting = TASKS["below"], {"lr": 5e-4, "steps": 20}
    passing = _metrics(RISING, [0.1, 0.9])
    run = {"recipe": "r/v1", "task": "below", "task_version": task.version, "control": "none", "passed": True, "rc": 0,
           "wall_s": 400, "lr": 5e-4, "steps": 20, **gates.evaluate(passing, 0.25, tool=False)}
    control = {**run, "control": "shuffled", **gates.evaluate(_metrics(FLAT, [0.25, 0.25]), 0.25, tool=False)}
    runs, controls = [{**run, "seed": s} for s in (1, 2, 3)], [{**control, "seed": s} for s in (1, 2, 3)]

    def problems(runs, controls, own=False):
        return learns_problems(runs, controls, "r/v1", task, own, setting)

    assert problems(runs, controls) == []
    assert problems(runs[:2], controls)  # two seeds are not three
    assert problems(runs[:1], controls[:1], own=True) == []  # a pretrained model's own run
    missed = {"passed": False, "detail": "val-core/below/acc/mean@1: 0.2 -> 0.3 (gain 0.1)"}
    assert problems([{**runs[0], "gates": {**run["gates"], "validation gain": missed}}, *runs[1:]], controls)
    assert problems([{**runs[0], "rc": 1}, *runs[1:]], controls)
    # graded by the gates in force: a run that failed only a gate since retired counts as passing, whatever it recorded
    correlation = {"passed": False, "detail": "worst 0.984 (min 0.99)"}
    retired = {**runs[0], "passed": False, "gates": {**run["gates"], gates.RETIRED[0]: correlation}}
    assert problems([retired, *runs[1:]], controls) == []
    assert problems(runs, [{**control, "seed": s, **run} for s in (1, 2, 3)])
    assert problems([{**runs[0], "wall_s": 500}, *runs[1:]], controls)
    assert problems([{**runs[0], "task_version": task.version - 1}, *runs[1:]], controls)
    # a run at another lr or length than the card sets now (its learn_args changed), or of unknown lr: not a rerun
    assert problems([{**runs[0], "lr": 1.5e-4}, *runs[1:]], controls)
    assert problems([{**runs[0], "steps": 24}, *runs[1:]], controls)
    assert problems([{**runs[0], "args": ["+configs/perf=no_recompute"]}, *runs[1:]], controls)  # a lever's run: apart
    # Liger's kernels keep the math: a run with them, by ARGS or by the recipe's default, is a rerun
    assert problems([{**runs[0], "args": ["+configs/kernels=liger"]}, {**runs[1], "liger": True}, runs[2]], controls) == []
    assert problems([{**runs[0], "lr": None}, *runs[1:]], controls)
    # a stale control beside them: it must have failed an agreement gate, and it does not count as a shuffled one
    stale = {**run, "control": "stale", "seed": 1, "gates": {**run["gates"], "agreement rollout_corr/k3_kl":
                                                             {"passed": False, "detail": "worst 4.7 (max 0.01)"}}}
    assert problems(runs, [*controls, stale]) == []
    assert problems(runs, [*controls, {**stale, "gates": run["gates"]}])
    assert problems(runs, [*controls[:2], stale])


def test_no_committed_run_of_a_current_task_is_left_out_of_its_learns_line():
    """A learns: line lists every committed rerun of its recipe's current task version and setting: none picked from
    several tries."""
    listed = {}
    for recipe in catalog.all_recipes():
        if learns := recipe.own_card_value("learns"):
            listed[recipe.label] = (task_of(recipe), learn_run.setting(recipe),
                                    {f.rsplit("/", 1)[-1] for f in learns["runs"] + learns["controls"]})
    for record in tally.records():
        if record["recipe"] in listed:
            task, setting, files = listed[record["recipe"]]
            assert not current(record, task, setting) or record["file"] in files, \
                f"{record['file']} is not in its recipe's learns: line"


def test_sums_rows_are_the_arithmetic_recipes_and_its_control_keeps_the_prompts():
    task = TASKS["sums"]
    true, shuffled = task.rows("train", 200, seed=1), task.rows("train", 200, seed=1, shuffled=True)
    for row in true:
        question = row["prompt"][-1]["content"]  # after the recipe's one worked example
        a, b = (int(n) for n in question.removeprefix("What is ").split("?")[0].split(" + "))
        assert row["reward_model"]["ground_truth"] == str(a + b) and row["data_source"] == "arithmetic"
    assert [a["prompt"] for a in true] == [b["prompt"] for b in shuffled]
    assert sum(a["reward_model"] == b["reward_model"] for a, b in zip(true, shuffled)) < 30  # ~1 in 39 by chance


def test_sums_validation_asks_only_the_held_out_questions_and_training_never():
    from verl_recipes.data import arithmetic

    question = lambda row: row["prompt"][-1]["content"]  # noqa: E731
    held_out = {question(row) for row in arithmetic.rows()[1]}
    assert held_out == {arithmetic.QUESTION.format(a=a, b=b) for a, b in arithmetic.HELD_OUT}
    task = TASKS["sums"]
    assert {question(row) for row in task.rows("test", 64, seed=2)} <= held_out
    assert not {question(row) for row in task.rows("train", 1024, seed=2)} & held_out


def test_a_pretrained_models_baseline_grades_every_sample_of_every_row_in_batches(tmp_path, monkeypatch):
    """build.sampled_score samples OWN_SAMPLES answers a row, OWN_BATCH_ROWS rows a call (left-padded prompts of
    different lengths), and grades each answer against its own row's label."""
    from verl_recipes.learn import build
    from verl_recipes.smoke.tiny import MODELS

    model = MODELS["qwen2"](tmp_path / "model", seed=0)
    rows = TASKS["sums"].rows("test", 5, seed=1)
    rows[0] = {**rows[0], "prompt": [*rows[0]["prompt"][:-1], {"role": "user", "content": "What is 1 + 2? " * 4}]}
    graded = []

    def score(source, text, truth, extra):
        graded.append((source, truth))
        return {"score": float(len(graded) % 2)}

    monkeypatch.setattr(build, "OWN_BATCH_ROWS", 2)
    monkeypatch.setattr(build, "OWN_TOKENS", 3)
    mean = build.sampled_score(model, TASKS["sums"], score, rows, seed=0)
    assert graded == [(row["data_source"], row["reward_model"]["ground_truth"])
                      for row in rows for _ in range(build.OWN_SAMPLES)]
    assert mean == pytest.approx(sum(n % 2 for n in range(1, len(graded) + 1)) / len(graded))


@pytest.mark.slow
def test_a_pretrained_learning_run_is_the_recipe_itself_with_its_own_model(tmp_path):
    """learn_model: own: no tiny overlay and no warm-up lr; the recipe's batch, lr and steps, greedy validation."""
    from verl_recipes.check.recipe import check
    from verl_recipes.compose import compose
    from verl_recipes.learn.run import learn_args, seed_args
    from verl_recipes.smoke.tiny import MODELS

    recipe = catalog.get("smollm2-135m-grpo")
    assert recipe.card_value("learn_model") == "own" and task_of(recipe).name == "sums"
    MODELS["qwen2"](tmp_path / "model")  # any local model folder stands in for the prepared SmolLM2
    args = learn_args(recipe, tmp_path, str(tmp_path / "model")) + seed_args(3)
    assert not any(a.startswith("+configs/smoke") for a in args)
    assert check(recipe, args) == []
    own, plain = compose(recipe, args), compose(recipe)
    assert own.actor_rollout_ref.actor.optim.lr == plain.actor_rollout_ref.actor.optim.lr
    assert own.data.train_batch_size == plain.data.train_batch_size
    assert own.actor_rollout_ref.rollout.val_kwargs.do_sample is False and own.trainer.val_before_train
    assert own.data.seed == 3 and own.actor_rollout_ref.rollout.seed == 3
    assert own.reward.custom_reward_function.path == plain.reward.custom_reward_function.path


def test_the_tally_counts_every_rerun_by_task_version_and_the_readme_shows_it(tmp_path):
    import json

    def graded(passed: bool) -> dict:  # what the tally counts: the gates, not the record's own `passed`
        return {"gates": {"validation gain": {"passed": passed, "detail": ""}}, "passed": passed}

    run = {"recipe": "r/v1", "task": "t", "control": "none", "wall_s": 400.0, "last_score": 0.9, "rc": 0, **graded(True)}
    for name, seed, passed, version in (("a", 1, True, 2), ("b", 2, False, 2), ("c", 3, True, 2), ("d", 1, False, None)):
        (tmp_path / f"{name}.json").write_text(json.dumps({**run, "seed": seed, **graded(passed),
                                                           "task_version": version}))
    for name, seed in (("g", 1), ("h", 2)):  # the same task at another lr (a card's learn_args) is counted apart
        (tmp_path / f"{name}.json").write_text(json.dumps({**run, "seed": seed, "passed": True, "task_version": 2,
                                                           "lr": 1.5e-4}))
    for name, steps in (("i", 20), ("j", 24)):  # and at another length
        (tmp_path / f"{name}.json").write_text(json.dumps({**run, "seed": 1, "passed": True, "task_version": 2,
                                                           "lr": 1.5e-4, "steps": steps}))
    (tmp_path / "k.json").write_text(json.dumps({**run, "seed": 1, "task_version": 2, "lr": 1.5e-4, "steps": 24,
                                                 "args": ["+configs/kernels=liger"]}))  # a user's overrides: apart
    (tmp_path / "c.metrics.jsonl").write_text("{}")
    for name, curves in (("e", {"score": {}}), ("f", {"score": {"1": 0.2}})):  # died at start-up; died at step 2
        (tmp_path / f"{name}.json").write_text(json.dumps({**run, "task": "u", "seed": 1, "passed": False, "rc": 1,
                                                           "curves": curves}))
    body = tally.table(tally.records(tmp_path))
    assert "| r/v1 | t v2 | none | 2 / 3 | 1, 2, 3 |" in body
    assert "| r/v1 | u v1 | none | 0 / 2 | 1, 1 | exit 1 before step 1, exit 1 |" in body
    assert "| r/v1 | t v1 | none | 0 / 1 | 1 |" in body  # a record from before versions ran version 1
    assert "| r/v1 | t v2 at lr 0.00015 | none | 2 / 2 | 1, 2 |" in body
    assert "| r/v1 | t v2 at lr 0.00015, 20 steps | none | 1 / 1 | 1 |" in body
    assert "| r/v1 | t v2 at lr 0.00015, 24 steps | none | 1 / 1 | 1 |" in body
    assert "| r/v1 | t v2 at lr 0.00015, 24 steps, Liger kernels | none | 1 / 1 | 1 |" in body
    (tmp_path / "l.json").write_text(json.dumps({**run, "seed": 2, "task_version": 2, "lr": 1.5e-4, "steps": 24,
                                                 "liger": True}))  # on by the recipe's default: the same row
    assert "| r/v1 | t v2 at lr 0.00015, 24 steps, Liger kernels | none | 2 / 2 | 1, 2 |" in tally.table(
        tally.records(tmp_path))
    (tmp_path / "m.json").write_text(json.dumps({**run, "seed": 1, "task_version": 2, "lr": 1.5e-4, "steps": 24,
                                                 "args": ["+configs/perf=no_recompute"]}))  # a lever: apart
    assert "| r/v1 | t v2 at lr 0.00015, 24 steps, with +configs/perf=no_recompute | none | 1 / 1 | 1 |" in tally.table(
        tally.records(tmp_path))
    readme = (tally.RESULTS / "README.md").read_text()
    assert tally.written(readme, tally.table(tally.records())) == readme, "run python -m verl_recipes.learn.tally --write"


@pytest.mark.parametrize("k3, passed", [(0.3, True), (1e-3, False)])
def test_the_stale_control_runs_with_the_fault_and_passes_only_when_agreement_fails(tmp_path, monkeypatch, k3, passed):
    import json

    from omegaconf import OmegaConf

    from verl_recipes import launch
    from verl_recipes.learn.run import run
    from verl_recipes.runtime import faults

    (tmp_path / "learn.json").write_text(json.dumps({"recipe": "qwen25-7b-grpo/v1", "task": "below", "task_version": 2,
                                                     "control": "stale", "seed": 1, "baseline": 0.25, "reward": "r",
                                                     "warm_up": None}))
    steps = _metrics(RISING[:20], [0.25, 0.7])
    for step in range(5, 21):  # the rollout samples the first push's policy while the trainer moves on
        steps[step]["rollout_corr/k3_kl"] = k3
    for name in (faults.FAULT_ENV, "RL_DATA_DIR"):  # restored after the test: run() sets them in this process
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("RL_RUNS_DIR", str(tmp_path / "runs"))
    seen = {}

    def fake_launch(recipe, overrides, tag, mode):
        seen["fault"] = os.environ.get(faults.FAULT_ENV)
        dumps = Path(next(o for o in overrides if o.startswith("trainer.rollout_data_dir=")).split("=", 1)[1])
        (dumps / "1.jsonl").write_text(_dump(1, [[0.0, 0.0], [0.0, 1.0]]))  # verl dumps as the run goes
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in steps.items()))
        cfg = OmegaConf.create({"algorithm": {"rollout_correction": {"bypass_mode": False}},
                                "trainer": {"total_training_steps": 20},
                                "actor_rollout_ref": {"actor": {"optim": {"lr": 5e-4}}, "model": {"use_liger": True}},
                                "model_engine": "dp"})
        return 0, run_dir, cfg

    monkeypatch.setattr(launch, "launch", fake_launch)
    monkeypatch.setattr("verl_recipes.learn.run.plot", lambda *a: None)
    assert run(catalog.get("qwen25-7b-grpo"), "trainer.val_before_train=true", tmp_path, seed=1) == (0 if passed else 1)
    assert seen["fault"] == faults.STALE_WEIGHTS
    report = json.loads((tmp_path / "run" / "learn.json").read_text())
    assert (report["control"], report["passed"]) == ("stale", passed)
    assert report["lr"] == 5e-4 and report["args"] == ["trainer.val_before_train=true"]  # the user's, counted apart
    assert report["liger"] is True  # the recipe's own kernels, recorded: the tally shows them
    assert report["samples"]["zero_signal"] == {"1": 0.5}  # the dumps moved into the launch folder and digested
    assert (tmp_path / "run" / "generations" / "1.jsonl").exists() and not list((tmp_path / "runs").glob("learn-*"))


def _dump(step: int, groups: list[list[float]]) -> str:
    """verl's rollout dump of one step (trainer_base._write_generations): a line a sample, uid <prompt>_<rollout>_<n>."""
    import json

    return "".join(json.dumps({"input": f"user Digits: {g} 1 6 7. Which is below 5? assistant", "output": f"\\boxed{{{i}}}",
                               "gts": str(g), "score": score, "step": step, "uid": f"p{g}_{i}_0"}) + "\n"
                   for g, scores in enumerate(groups) for i, score in enumerate(scores))


def test_samples_digest_counts_groups_without_signal_and_keeps_the_first_and_last_steps(tmp_path):
    from verl_recipes.learn import samples

    assert samples.digest(tmp_path / "none") == {}  # verl dumped nothing (a run that died at start-up)
    (tmp_path / "1.jsonl").write_text(_dump(1, [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))
    (tmp_path / "2.jsonl").write_text(_dump(2, [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]))
    (tmp_path / "10.jsonl").write_text(_dump(10, [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]))
    digest = samples.digest(tmp_path)
    # all alike, right or wrong, is a group GRPO cannot learn from
    assert digest["zero_signal"] == {1: round(2 / 3, 3), 2: 0.0, 10: 1.0}
    assert sorted(digest["examples"]) == [1, 10]  # numeric order, not 1, 10, 2
    first = digest["examples"][1]
    assert len(first) == samples.PROMPTS and first[0]["answer"] == "0"
    assert first[0]["samples"] == [["\\boxed{0}", 0.0], ["\\boxed{1}", 1.0], ["\\boxed{2}", 0.0]]

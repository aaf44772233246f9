"""`make <recipe>-learn TINY=<dir>`: the recipe's composed config + its tiny overlay + configs/learn/tiny, on the
folder `python -m verl_recipes.learn.build` made (a warmed-up tiny model and its task's data), then the learning
gates (verl_recipes/learn/gates.py). Writes learn.json and learn.png beside the run's metrics, and verl's dumps of what
the rollout sampled to generations/ there (learn.json's `samples` digests them: verl_recipes/learn/samples.py).

A folder built with `--control shuffled` is the negative control of the score gates: the run passes when its score
gate *fails*. One built with `--control stale` runs with the rollout's weights left stale from the first push
(verl_recipes/runtime/faults.py): it passes when an agreement gate fails.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from verl_recipes.catalog import Recipe, RecipeError
from verl_recipes.check import gates as smoke_gates
from verl_recipes.compose import runs_dir, split_args
from verl_recipes.learn import gates, samples
from verl_recipes.runtime import faults

OVERLAY = "+configs/learn=tiny"
OWN_OVERLAY = "+configs/learn=own"  # a recipe that learns with its own pretrained model (card learn_model: own)


def own_reward(recipe: Recipe):
    """The recipe's reward function as the recipe alone composes it (the smoke overlay swaps in the smoke reward)."""
    from verl_recipes.compose import compose

    return compose(recipe).reward.custom_reward_function


def learn_args(recipe: Recipe, tiny: Path, model: str | None = None) -> list[str]:
    """The tiny smoke overlay and model, then the learn overlay, the recipe's own reward, the card's tiny_args and its
    learn_args (what its task needs beyond configs/learn/tiny, e.g. a smaller lr for a longer answer). With `model`
    (the folder's own pretrained model): the recipe as it is, that model and configs/learn/own, then learn_args."""
    from verl_recipes.smoke.run import overlay_args

    reward = own_reward(recipe)
    rewarded = [f"reward.custom_reward_function.path={reward.path}", f"reward.custom_reward_function.name={reward.name}"]
    if model:
        return [f"actor_rollout_ref.model.path={model}", OWN_OVERLAY, *rewarded,
                *split_args(recipe.card_value("learn_args", ""))]
    return [*overlay_args(recipe, True, str(tiny.resolve() / "model"))[:2], OVERLAY, *rewarded,
            *split_args(recipe.card_value("tiny_args", "")), *split_args(recipe.card_value("learn_args", ""))]


def trained_with(cfg) -> dict:
    """The lr and steps of a composed learning run, and whether Liger's kernels ran (a recipe may turn them on itself):
    with the task's version, what a rerun repeats (tally.setting)."""
    from verl_recipes.check.preflight import liger_runs

    return {"steps": int(cfg.trainer.total_training_steps), "lr": float(cfg.actor_rollout_ref.actor.optim.lr),
            "liger": liger_runs(cfg)}


def setting(recipe: Recipe) -> dict:
    """The lr and steps a learning run of `recipe` trains with now, read from its composed learn config: a card whose
    learn_args change them starts a new count of reruns (a model path is all the folder adds, and it changes
    neither)."""
    from verl_recipes.compose import compose

    own = recipe.card_value("learn_model") == "own"
    return trained_with(compose(recipe, learn_args(recipe, Path("tiny"), "model" if own else None)))


def built(tiny: Path) -> dict:
    info = tiny / "learn.json"
    if not info.is_file():
        raise RecipeError(f"{info} is missing: build the folder with `python -m verl_recipes.learn.build {tiny} "
                          f"--recipe <recipe>` first")
    return json.loads(info.read_text())


def plot(result: dict, title: str, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = result["curves"]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot([int(s) for s in c["score"]], list(c["score"].values()), label="training score (mean)")
    ax.plot([int(s) for s in c["validation"]], list(c["validation"].values()), "o-", label="validation acc (greedy)")
    ax.axhline(result["baseline"], color="grey", ls="--", label="warm-up baseline")
    ax.axhline(result["baseline"] + gates.OVER_BASELINE, color="grey", ls=":", label="score gate")
    ax.set_xlabel("step")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def seed_args(seed: int) -> list[str]:
    """A rerun's seed: the order the sampler draws the training prompts in, and vLLM's sampling (the engine's seed;
    verl 0.9.1 leaves data.seed null, which shuffles alike on every run, and rollout.seed at 42)."""
    return [f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}"]


def gate_of(control: str) -> str:
    return "agreement" if control == "stale" else "score"


def run(recipe: Recipe, args: str | None, tiny: Path, seed: int = 0) -> int:
    from verl_recipes.launch import launch

    info = built(tiny)
    if info["recipe"].split(":")[0] != recipe.label.split(":")[0]:
        raise RecipeError(f"{tiny} was built for {info['recipe']}, not {recipe.label}")
    os.environ["RL_DATA_DIR"] = str(tiny.resolve() / "data")
    if info["control"] == "stale":  # every process of the run inherits it (launch.run_env)
        os.environ[faults.FAULT_ENV] = faults.STALE_WEIGHTS
    started = time.time()
    # the launch folder is named only once the launch starts: verl dumps into a folder of this run's own, moved there
    runs_dir().mkdir(parents=True, exist_ok=True)
    dumps = Path(tempfile.mkdtemp(prefix="learn-generations.", dir=runs_dir()))
    overrides = (learn_args(recipe, tiny, info.get("model")) + seed_args(seed)
                 + [f"trainer.rollout_data_dir={dumps}"] + split_args(args))
    rc, run_dir, cfg = launch(recipe, overrides, tag="-learn", mode="never")
    shutil.move(dumps, run_dir / "generations")
    steps = smoke_gates.read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else {}
    result = gates.evaluate(steps, info["baseline"], tool=info["task"] == "seeded",
                            bypass=bool(cfg.algorithm.rollout_correction.bypass_mode))
    control = info["control"] != "none"
    passed = gates.passes({"rc": rc, "control": info["control"], **result})
    report = {"recipe": recipe.label, "task": info["task"], "task_version": info.get("task_version"),
              "control": info["control"], "seed": seed, "args": split_args(args),
              "build_seed": info["seed"], "rc": rc,
              "passed": passed, "wall_s": round(time.time() - started, 1), "date": time.strftime("%Y-%m-%d"),
              "reward": info["reward"], "warm_up": info["warm_up"], **trained_with(cfg), **result,
              "samples": samples.digest(run_dir / "generations")}
    (run_dir / "learn.json").write_text(json.dumps(report, indent=1, default=str))
    plot(report, f"{recipe.label} learn ({info['task']}, control {info['control']}, seed {seed})", run_dir / "learn.png")
    for name, gate in result["gates"].items():
        print(f"[learn]   {'ok  ' if gate['passed'] else 'FAIL'} {name}: {gate['detail']}")
    if rc or not result["curves"]["score"]:
        verdict = f"the run failed (exit {rc}, {len(result['curves']['score'])} steps logged): see its log"
    elif passed:
        verdict = f"control failed its {gate_of(info['control'])} gate, as it must" if control else "learned"
    else:
        verdict = (f"control PASSED its {gate_of(info['control'])} gates: they cannot tell its fault apart" if control
                   else "did not learn")
    print(f"[learn] {recipe.label}: {'PASS' if passed else 'FAIL'} ({verdict}) in {report['wall_s']} s -> "
          f"{run_dir}/learn.json")
    return 0 if passed else 1

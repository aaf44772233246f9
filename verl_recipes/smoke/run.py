"""`make <recipe>-smoke`: the real recipe plus a smoke overlay, then the metric gates.

Node smoke (8 GPUs): `+configs/smoke=node` and the card's `smoke_model` (smallest real model of the family).
Tiny smoke (1 GPU): `TINY=<dir>` from `python -m verl_recipes.smoke.tiny`: `+configs/smoke=tiny_gpu` (or the card's
tiny_overlay; `--overlay` picks another of its list), its model and data.
Dry run (CPU): print the composed smoke config and prove it, nothing is launched.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from verl_recipes import entrypoints
from verl_recipes.catalog import Recipe, RecipeError
from verl_recipes.check import gates, weights
from verl_recipes.compose import split_args


def frozen_modules(recipe: Recipe) -> list[str] | None:
    """checks.yaml `frozen`: modules whose tensors the run must leave bit-identical (None: the recipe freezes none)."""
    return gates.load_checks(recipe.folder / "checks.yaml").get("frozen")


def weight_gates_on(recipe: Recipe, tiny: bool) -> bool:
    """Always on the tiny path; on a node only where something is frozen (a real model's full save is large)."""
    return tiny or frozen_modules(recipe) is not None


def tiny_overlays(recipe: Recipe) -> list[str]:
    """The card's tiny_overlay: one configs/smoke fragment (one GPU, two for async), or a list of tiny layouts
    (a Megatron MoE recipe: one GPU, then two with EP and TP), the first being the default."""
    value = recipe.card_value("tiny_overlay", "tiny_gpu")
    return [value] if isinstance(value, str) else list(value)


def overlay(recipe: Recipe, tiny: bool, choice: str | None = None) -> str:
    """The configs/smoke fragment: a tiny overlay of the card (`choice`, else its first) or smoke_overlay (a node)."""
    if not tiny:
        return recipe.card_value("smoke_overlay", "node")
    options = tiny_overlays(recipe)
    if choice is not None and choice not in options:
        raise RecipeError(f"{recipe.label}: its card's tiny overlays are {', '.join(options)}, not '{choice}'")
    return choice or options[0]


def overlay_args(recipe: Recipe, tiny: bool, model: str, choice: str | None = None) -> list[str]:
    """The smoke overlay and the card's arguments for it, with `model` swapped in."""
    save = weights.SAVE_LAST_STEP if weight_gates_on(recipe, tiny) else []
    return [f"+configs/smoke={overlay(recipe, tiny, choice)}", f"actor_rollout_ref.model.path={model}",
            *split_args(recipe.card_value("tiny_args" if tiny else "smoke_args", "")), *save]


def smoke_args(recipe: Recipe, tiny: Path | None, choice: str | None = None) -> list[str]:
    """Tiny: the model built in `tiny`/model; node: the card's smoke_model (the smallest real model of the family)."""
    if tiny is not None:
        return overlay_args(recipe, True, str(tiny.resolve() / "model"), choice)
    model = recipe.card_value("smoke_model")
    if not model:
        raise RecipeError(f"{recipe.label}: its card has no smoke_model (the smallest real model of the family)")
    return overlay_args(recipe, False, model)


def dry_run(recipe: Recipe, args: str | None) -> int:
    from verl_recipes.check.recipe import check
    from verl_recipes.compose import compose, to_yaml

    full = smoke_args(recipe, None) + split_args(args)
    print(f"# ---- {recipe.label} smoke config (node overlay) ----")
    print(to_yaml(compose(recipe, full)), end="")
    errors = check(recipe, full)
    print(f"# {'FAIL' if errors else 'ok'}: {recipe.label} smoke config " + ("\n# ".join([""] + errors)))
    return 1 if errors else 0


def run(recipe: Recipe, args: str | None, tiny: Path | None, choice: str | None = None) -> int:
    from verl_recipes.launch import launch

    if tiny is not None:
        os.environ["RL_DATA_DIR"] = str(tiny.resolve() / "data")
    started = time.time()
    # a smoke never resumes: each gets a fresh run folder, so a stale smoke's checkpoints cannot stand in for training
    rc, run_dir, cfg = launch(recipe, smoke_args(recipe, tiny, choice) + split_args(args), tag="-smoke", mode="never")
    steps = gates.read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else {}
    failures = ([f"verl exited with {rc}"] if rc else []) + gates.evaluate(
        steps, int(cfg.trainer.total_training_steps),
        gates.load_gates(recipe.folder / "checks.yaml", tiny is not None, recipe.variant,
                         bypass=bool(cfg.algorithm.rollout_correction.bypass_mode)),
        lag=entrypoints.get(recipe.entrypoint).metrics_lag)
    weight_report = {}
    if weight_gates_on(recipe, tiny is not None) and not rc:
        final = weights.last_step_folder(run_dir, cfg.trainer.default_local_dir, int(cfg.trainer.total_training_steps),
                                         cfg.model_engine)
        found, weight_report = weights.compare(weights.local_model(cfg.actor_rollout_ref.model.path), final,
                                               frozen_modules(recipe) or [])
        failures += found
    report = {"recipe": recipe.label, "tiny": tiny is not None, "rc": rc, "wall_s": round(time.time() - started, 1),
              "weights": weight_report,
              "steps": {s: {k: d[k] for k in d if k.startswith(("timing_s/", "critic/score", "actor/", "response_length/"))}
                        for s, d in steps.items()}, "failures": failures, "date": time.strftime("%Y-%m-%d")}
    (run_dir / "smoke.json").write_text(json.dumps(report, indent=1, default=str))
    print("\n".join(gates.summary(steps)))
    print(f"[smoke] {recipe.label}: {'PASS' if not failures else 'FAIL'} in {report['wall_s']} s -> {run_dir}/smoke.json")
    for failure in failures:
        print(f"[smoke]   gate failed: {failure}")
    return 1 if failures else 0

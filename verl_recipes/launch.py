"""Launch a recipe: GPUs first, then the proof, then data, then the real verl entry point.

verl receives the composed, resolved config as a file in the run folder, so what ran is exactly what was proven
and stays on disk next to the metrics.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import DictConfig

from verl_recipes import cold_start, entrypoints
from verl_recipes.catalog import REPO, Recipe, RecipeError
from verl_recipes.check.preflight import gpu_problems, missing_packages, profiling_preflight, required_packages
from verl_recipes.check.recipe import check
from verl_recipes.compose import compose, runs_dir, split_args, to_yaml


def prepare_data(recipe: Recipe) -> None:
    from verl_recipes.data.prepare import outputs

    for dataset in recipe.card_value("data", []):
        if all(p.exists() for p in outputs(dataset)):
            continue
        print(f"[launch] preparing dataset {dataset} (missing: {[str(p) for p in outputs(dataset) if not p.exists()]})")
        subprocess.run([sys.executable, "-m", "verl_recipes.data.prepare", dataset], cwd=REPO, check=True)


def write_run_config(recipe: Recipe, cfg: DictConfig, tag: str = "") -> Path:
    run_dir = runs_dir() / f"{recipe.run_name}{tag}" / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=False)
    (run_dir / "config.yaml").write_text(to_yaml(cfg))
    return run_dir


def verl_command(recipe: Recipe, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", recipe.entrypoint, f"--config-path={run_dir}", "--config-name=config",
            f"hydra.run.dir={run_dir}"]


def run_env(run_dir: Path) -> dict:
    env = dict(os.environ)
    env.setdefault("VERL_FILE_LOGGER_PATH", str(run_dir / "metrics.jsonl"))
    return env


def launch(recipe: Recipe, args: str | list[str] | None, tag: str = "", cluster: str = "") -> tuple[int, Path, DictConfig]:
    """Run the recipe here, or submit it to the Ray cluster at `cluster`; returns the exit code, run folder and config."""
    if not cluster and gpu_problems(recipe.label, recipe.name):  # before anything slow or downloaded
        raise RecipeError(gpu_problems(recipe.label, recipe.name)[0])
    args = split_args(args)
    start = cold_start.model_args(recipe, args)
    if start:
        print(f"[launch] {recipe.label} starts from its cold start: {start[0].split('=', 1)[1]}", flush=True)
    args = [*start, *args]
    cfg = compose(recipe, args)
    errors = check(recipe, args) + profiling_preflight(cfg, runs_dir() / f"{recipe.run_name}{tag}")
    if cluster:  # the job checks packages on every node before verl starts (verl_recipes/runtime/node_check.py)
        from verl_recipes.cluster import cluster_gpu_errors

        errors += cluster_gpu_errors(cluster, cfg, recipe)
    else:
        entry = entrypoints.get(recipe.entrypoint)
        errors += gpu_problems(recipe.label, recipe.name, entrypoints.gpus_per_node_needed(cfg, entry, recipe.node_gpus))
        errors += missing_packages(required_packages(cfg))
    if errors:
        raise RecipeError("not launched:\n  " + "\n  ".join(errors))
    prepare_data(recipe)
    run_dir = write_run_config(recipe, cfg, tag)
    if cluster:
        from verl_recipes.cluster import submit

        return submit(recipe, cfg, run_dir, cluster), run_dir, cfg
    command = verl_command(recipe, run_dir)
    print(f"[launch] {recipe.label} -> {run_dir}\n[launch] {' '.join(command)}", flush=True)
    return subprocess.call(command, cwd=run_dir, env=run_env(run_dir)), run_dir, cfg

"""Launch a recipe: GPUs first, then the proof, then the resumption decision, then model and data, then verl's entry
point.

verl receives the composed, resolved config as a file in the launch folder, so what ran is exactly what was proven
and stays on disk next to the metrics. Where checkpoints go and whether they are resumed is decided by
verl_recipes/resume.py and said before verl starts. `dry=True` prints all of it and creates nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from verl_recipes import cold_start, entrypoints, models, resume, supervisor
from verl_recipes.catalog import REPO, Recipe, RecipeError
from verl_recipes.check.files import data_files
from verl_recipes.check.preflight import (
    attention_path,
    fallback_overrides,
    gpu_problems,
    missing_packages,
    profiling_preflight,
    required_packages,
)
from verl_recipes.check.recipe import check
from verl_recipes.compose import compose, split_args, to_yaml
from verl_recipes.runtime import weight_push_socket

LAUNCH_RECORD = "launch.json"  # recipe, args, decision, command; exit_code once verl returns
VERL_LOG = "verl.log"  # verl's output (Ray's and vLLM's lines with it), kept for every local run


@dataclass
class Plan:
    """Everything a launch does, decided before anything is written."""

    recipe: Recipe
    args: list[str]
    cfg: DictConfig
    decision: resume.Decision
    launch_dir: Path
    cluster: str = ""
    data: list[str] = field(default_factory=list)  # datasets that are missing and will be prepared
    unused_data: list[str] = field(default_factory=list)  # the card's datasets the config does not read
    model: str | None = None  # the model (hub id) whose folder is missing and will be prepared (verl_recipes/models.py)

    @property
    def command(self) -> list[str]:
        return verl_command(self.recipe, self.launch_dir)

    def describe(self) -> list[str]:
        where = f"submit to the Ray cluster at {self.cluster}" if self.cluster else "run here"
        return [
            f"[launch] {self.recipe.label}: {self.decision.note}",
            f"[launch] config: {self.launch_dir / 'config.yaml'} (run folder {self.decision.run_dir})",
            f"[launch] data to prepare: {', '.join(self.data) if self.data else 'none'}"
            + (f" (the card's {', '.join(self.unused_data)} not prepared: data.train_files/val_files name other "
               f"files)" if self.unused_data else "" if self.data else " (all present)"),
            *self.model_lines(),
            f"[launch] {attention_path(self.cfg)}",
            f"[launch] {where}: {' '.join(self.command)}",
        ]

    def model_lines(self) -> list[str]:
        """What is said of a model prepared from a packaged GGUF; nothing for any other model."""
        hub_id = models.preparable(self.cfg.actor_rollout_ref.model.path)
        if hub_id is None:
            return []
        if self.model is None:
            return [f"[launch] model to prepare: none ({hub_id} present in {models.folder(hub_id)})"]
        entry = models.GGUF_MODELS[hub_id]
        problems = "".join(f"; cannot here: {p}" for p in models.problems(hub_id))
        return [f"[launch] model to prepare: {hub_id}, dequantized from {entry.file} of {entry.distribution} into "
                f"{models.folder(hub_id)}{problems}"]


def card_data(recipe: Recipe, cfg: DictConfig) -> tuple[list[str], list[str]]:
    """(the card's datasets to prepare, those the config does not read). A dataset is prepared only when
    data.train_files/val_files name one of its files and one is missing: with ARGS="data.train_files=..." for your
    own files, the card's dataset is neither downloaded nor needed."""
    from verl_recipes.data.prepare import outputs

    read = {file for key in ("train_files", "val_files") for file in data_files(cfg.data[key])}
    used = [d for d in recipe.card_value("data", []) if read & {str(p) for p in outputs(d)}]
    unused = [d for d in recipe.card_value("data", []) if d not in used]
    return [d for d in used if not all(p.exists() for p in outputs(d))], unused


def prepare_model(hub_id: str | None) -> None:
    if hub_id is not None:
        print(f"[launch] preparing model {hub_id}", flush=True)
        subprocess.run([sys.executable, "-m", "verl_recipes.models", hub_id], cwd=REPO, check=True)


def prepare_data(datasets: list[str]) -> None:
    for dataset in datasets:
        print(f"[launch] preparing dataset {dataset}", flush=True)
        subprocess.run([sys.executable, "-m", "verl_recipes.data.prepare", dataset], cwd=REPO, check=True)


def new_launch_dir(run_dir: Path) -> Path:
    """run_dir/launches/<time>, with a -N suffix when two launches start in the same second."""
    base = run_dir / resume.LAUNCHES / time.strftime("%Y%m%d-%H%M%S")
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def resolved_yaml(cfg: DictConfig) -> str:
    """The config with every interpolation resolved: what resume.py compares a later launch against."""
    return yaml.safe_dump(OmegaConf.to_container(cfg, resolve=True), sort_keys=False)


def write_launch(plan: Plan) -> None:
    """The run folder's config.yaml (first launch only), and the launch folder: verl's config and the record."""
    run_dir = plan.decision.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / resume.STORED).exists():
        (run_dir / resume.STORED).write_text(resolved_yaml(plan.cfg))
    plan.launch_dir.mkdir(parents=True, exist_ok=False)
    (plan.launch_dir / "config.yaml").write_text(to_yaml(plan.cfg))
    record = {"recipe": plan.recipe.label, "args": plan.args, "decision": plan.decision.note,
              "resumed_from": str(plan.decision.checkpoint or ""), "command": plan.command,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (plan.launch_dir / LAUNCH_RECORD).write_text(json.dumps(record, indent=1))


def finish(launch_dir: Path, code: int) -> None:
    record = json.loads((launch_dir / LAUNCH_RECORD).read_text())
    record.update(exit_code=code, ended=time.strftime("%Y-%m-%dT%H:%M:%S"))
    (launch_dir / LAUNCH_RECORD).write_text(json.dumps(record, indent=1))


def verl_command(recipe: Recipe, launch_dir: Path) -> list[str]:
    return [sys.executable, "-m", recipe.entrypoint, f"--config-path={launch_dir}", "--config-name=config",
            f"hydra.run.dir={launch_dir}"]


def metrics_file(launch_dir: Path) -> Path:
    """Where verl's file logger writes this launch's metrics: the launch folder unless the user names a file."""
    return Path(os.environ.get("VERL_FILE_LOGGER_PATH") or launch_dir / "metrics.jsonl")


def run_env(launch_dir: Path) -> dict:
    """verl's environment: its metrics file, and an id of this run that names its weight-push sockets, which
    every process of the run's Ray cluster inherits (verl_recipes/runtime/weight_push_socket.py)."""
    env = dict(os.environ)
    env["VERL_FILE_LOGGER_PATH"] = str(metrics_file(launch_dir))
    env[weight_push_socket.RUN_ID_ENV] = uuid.uuid4().hex[:12]
    return env


def plan_launch(recipe: Recipe, args: str | list[str] | None, tag: str = "", cluster: str = "",
                mode: str = "auto", dry: bool = False) -> Plan:
    """Prove the recipe with `args`, check this machine (not for a dry run) and decide the run folder."""
    problems = [] if cluster or dry else gpu_problems(recipe.label, recipe.name)
    if problems:  # before anything slow or downloaded
        raise RecipeError(problems[0])
    args = split_args(args)
    start = cold_start.model_args(recipe, args)
    if start:
        print(f"[launch] {recipe.label} starts from its cold start: {start[0].split('=', 1)[1]}", flush=True)
    args = [*start, *args]
    cfg = compose(recipe, args)
    fallbacks = [] if cluster else fallback_overrides(cfg)  # a cluster job's nodes are checked by node_check
    for override, package in fallbacks:
        print(f"[launch] {package} is not installed here: adding {override}", flush=True)
    if fallbacks:
        args = [*args, *(override for override, _ in fallbacks)]
        cfg = compose(recipe, args)
    errors = check(recipe, args)
    if errors:
        raise RecipeError("not launched:\n  " + "\n  ".join(errors))
    decision = resume.decide(f"{recipe.run_name}{tag}", cfg, mode, label=recipe.name)
    launch_dir = new_launch_dir(decision.run_dir)
    errors = profiling_preflight(cfg, launch_dir)
    if cluster and not dry:  # the job checks packages on every node before verl starts (runtime/node_check.py)
        from verl_recipes.cluster import cluster_gpu_errors

        errors += cluster_gpu_errors(cluster, cfg, recipe)
    elif not dry:
        entry = entrypoints.get(recipe.entrypoint)
        errors += gpu_problems(recipe.label, recipe.name, entrypoints.gpus_per_node_needed(cfg, entry, recipe.node_gpus))
        errors += missing_packages(required_packages(cfg))
    model = models.to_prepare(cfg.actor_rollout_ref.model.path)
    if model and not dry:  # the package that ships its GGUF, before anything starts
        errors += models.problems(model)
    if errors:
        raise RecipeError("not launched:\n  " + "\n  ".join(errors))
    cfg = compose(recipe, [*args, *decision.overrides()])
    return Plan(recipe, args, cfg, decision, launch_dir, cluster, *card_data(recipe, cfg), model=model)


def launch(recipe: Recipe, args: str | list[str] | None, tag: str = "", cluster: str = "", mode: str = "auto",
           dry: bool = False) -> tuple[int, Path, DictConfig]:
    """Run the recipe here, or submit it to the Ray cluster at `cluster`; returns the exit code, launch folder and
    config. A dry launch prints the plan and returns 0 without writing, preparing or starting anything. A local run's
    output goes to the console and the launch folder's VERL_LOG, which the supervisor reads when verl fails: a vLLM
    subprocess's death is named only there (2026-12-02: without it, a killed vLLM worker's run exited unnamed)."""
    plan = plan_launch(recipe, args, tag, cluster, mode, dry)
    print("\n".join(plan.describe()), flush=True)
    if dry:
        return 0, plan.launch_dir, plan.cfg
    prepare_model(plan.model)
    prepare_data(plan.data)
    write_launch(plan)
    if cluster:
        from verl_recipes.cluster import submit

        code = submit(recipe, plan.cfg, plan.launch_dir, cluster)
    else:  # supervised: a dead or stopped worker ends the run instead of hanging it (verl_recipes/supervisor.py)
        code = supervisor.run(plan.command, plan.launch_dir, run_env(plan.launch_dir), plan.launch_dir / VERL_LOG)
    finish(plan.launch_dir, code)
    return code, plan.launch_dir, plan.cfg


def trained_a_step(launch_dir: Path) -> bool:
    metrics = metrics_file(launch_dir)
    return metrics.is_file() and any(line.strip() for line in metrics.read_text().splitlines())


def launch_restarting(recipe: Recipe, args: str | list[str] | None, restarts: int,
                      mode: str = "auto") -> tuple[int, Path, DictConfig]:
    """launch() here, then up to `restarts` relaunches after a failed launch, each resuming the newest complete
    checkpoint (RESUME=auto). Only a launch that trained a step is relaunched: its start-up works, so its failure is
    the run's (a dead worker, a lost GPU), while one that failed before its first step would fail again."""
    if restarts < 0:
        raise RecipeError(f"RESTARTS={restarts}: give the number of relaunches, 0 or more")
    code, launch_dir, cfg = launch(recipe, args, mode=mode)
    for attempt in range(1, restarts + 1):
        if code == 0:
            break
        if not trained_a_step(launch_dir):
            print(f"[restart] not relaunching: the launch in {launch_dir} exited {code} before its first step, "
                  f"which a relaunch would repeat", flush=True)
            break
        print(f"[restart] {attempt} of {restarts}: the launch in {launch_dir} exited {code} after training; "
              f"relaunching from the newest complete checkpoint", flush=True)
        code, launch_dir, cfg = launch(recipe, args, mode="force" if mode == "force" else "auto")
    return code, launch_dir, cfg

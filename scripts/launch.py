"""Launch a recipe: GPUs first, then the proof, then data, then the real verl entry point.

verl receives the composed, resolved config as a file in the run folder, so what ran is exactly what was proven
and stays on disk next to the metrics.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import DictConfig

from scripts.catalog import REPO, Recipe, RecipeError
from scripts.checks import check
from scripts.compose import compose, runs_dir, to_yaml
from scripts.perf.preflight import profiling_preflight


def gpu_count() -> int:
    """NVIDIA GPUs visible here (0 when there is no driver); cheap, so it runs before anything else."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (subprocess.SubprocessError, OSError):
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = sum(line.startswith("GPU ") for line in out.splitlines())
    return min(count, len([d for d in visible.split(",") if d.strip()])) if visible else count


def require_gpus(recipe: Recipe, needed: int | None = None) -> None:
    found = gpu_count()
    if found == 0:
        raise RecipeError(
            f"{recipe.label}: no NVIDIA GPU on this machine (nvidia-smi finds none), so nothing was launched or "
            f"downloaded. Run it on a GPU node, submit it to a Ray cluster with CLUSTER=<address>, or prove it here "
            f"with `make {recipe.name}-check`."
        )
    if needed is not None and found < needed:
        raise RecipeError(
            f"{recipe.label}: the recipe declares {needed} GPUs per node (trainer.n_gpus_per_node plus any "
            f"standalone rollout GPUs) but this node has {found}; set ARGS=\"trainer.n_gpus_per_node={found} ...\" "
            f"or use a recipe for this node size"
        )


def gpus_per_node(cfg: DictConfig, recipe: Recipe) -> int:
    """GPUs this node must have: the trainer's, plus a standalone rollout pool when both share one node."""
    from scripts.async_rules import nodes_needed

    rollout = cfg.actor_rollout_ref.rollout
    shared_node = rollout.get("nnodes", 0) and nodes_needed(cfg, recipe.entrypoint) == 1
    return int(cfg.trainer.n_gpus_per_node) + (int(rollout.n_gpus_per_node) if shared_node else 0)


def missing_packages(cfg: DictConfig) -> list[str]:
    """Packages plain `pip install verl` lacks but this config needs at run time, with the extra that brings them."""
    needs = {"ray": "verl", "transfer_queue": "verl[vllm] or verl[sglang] (TransferQueue, for trainer.use_v1)"}
    if cfg.actor_rollout_ref.rollout.name in ("vllm", "sglang"):
        needs[cfg.actor_rollout_ref.rollout.name] = f"verl[{cfg.actor_rollout_ref.rollout.name}]"
    if cfg.model_engine == "megatron":
        needs["megatron.core"] = "verl[megatron] plus the pinned megatron-core (requirements/gpu-megatron.txt)"
        needs["transformer_engine"] = "verl[megatron] (TransformerEngine)"
    elif cfg.actor_rollout_ref.model.override_config.get("attn_implementation", "flash_attention_2") == "flash_attention_2":
        # verl's FSDP models load with flash_attention_2 unless overridden, and packing uses its varlen kernels
        needs["flash_attn"] = ("verl[flash-attn-cu130torch211] (requirements/gpu.txt), or run on sdpa: "
                               "actor_rollout_ref.model.override_config.attn_implementation=sdpa "
                               "actor_rollout_ref.model.use_remove_padding=false (as configs/smoke/tiny_gpu does)")
    missing = []
    for module, extra in needs.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(f"python module '{module}' is missing: install {extra}")
    return missing


def prepare_data(recipe: Recipe) -> None:
    from scripts.data.prepare import outputs

    for dataset in recipe.card_value("data", []):
        if all(p.exists() for p in outputs(dataset)):
            continue
        print(f"[launch] preparing dataset {dataset} (missing: {[str(p) for p in outputs(dataset) if not p.exists()]})")
        subprocess.run([sys.executable, "-m", "scripts.data.prepare", dataset], cwd=REPO, check=True)


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
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("VERL_FILE_LOGGER_PATH", str(run_dir / "metrics.jsonl"))
    return env


def launch(recipe: Recipe, args: str | list[str] | None, tag: str = "", cluster: str = "") -> tuple[int, Path, DictConfig]:
    """Run the recipe here, or submit it to the Ray cluster at `cluster`; returns the exit code, run folder and config."""
    if not cluster:
        require_gpus(recipe)
    cfg = compose(recipe, args)
    errors = check(recipe, args) + profiling_preflight(cfg, runs_dir() / f"{recipe.run_name}{tag}")
    if cluster:  # the job checks packages on every node before verl starts (scripts/cluster.py check-nodes)
        from scripts.cluster import cluster_gpu_errors

        errors += cluster_gpu_errors(cluster, cfg)
    else:
        require_gpus(recipe, gpus_per_node(cfg, recipe))
        errors += missing_packages(cfg)
    if errors:
        raise RecipeError("not launched:\n  " + "\n  ".join(errors))
    prepare_data(recipe)
    run_dir = write_run_config(recipe, cfg, tag)
    if cluster:
        from scripts.cluster import submit

        return submit(recipe, cfg, run_dir, cluster), run_dir, cfg
    command = verl_command(recipe, run_dir)
    print(f"[launch] {recipe.label} -> {run_dir}\n[launch] {' '.join(command)}", flush=True)
    return subprocess.call(command, cwd=run_dir, env=run_env(run_dir)), run_dir, cfg

"""`make <recipe>-node [G=4]`: the recipe at its real shape, 3 steps on this node of G GPUs, a record, gates.

Dry run (DRY=1, any machine): the node config composed once, the lent machine the planner picks and why, the layers,
every override with its reason, the planner's lines; proven as `make check` proves a recipe (on that machine's GPU
memory), and again as a node without flash-attn or apex launches it (the launcher's fallbacks). Nothing is built.

On the node: the model (random init, verl_recipes.random_models) and the prompts are built in the work folder
(RL_NODE_WORK, default /tmp/verl-node), the run goes through the launcher (its proof, a fresh run folder, verl's output
kept), and what it left is reduced to results/node/<recipe>[-<variant>].<hardware>.json, with its metrics beside it.
"""

from __future__ import annotations

import importlib.metadata
import json
import multiprocessing
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from verl_recipes import catalog
from verl_recipes.catalog import Recipe, RecipeError
from verl_recipes.node.config import NodeConfig, compose_node, recipe_on, with_layers
from verl_recipes.runtime.phase_memory import PHASE_MEMORY_ENV
from verl_recipes.runtime.vllm_preemptions import PREEMPTIONS_ENV

PLUGINS = ("verl_recipes.runtime.phase_memory", "verl_recipes.runtime.vllm_preemptions")
GPU_NAMES = re.compile(r"\b(GB200|B200|H200|H100|H800|H20|A100|L40S)\b")


def describe(node: NodeConfig) -> list[str]:
    layers = f"{node.layers} of the model's layers" if node.layers else "all of the model's layers"
    return [
        f"[node] {node.recipe.label} on {node.gpus} GPUs: {node.hub_id}, random init, {layers}",
        f"[node] machine: {node.machine.kind} ({node.machine.why})",
        *(f"[node]   {o.key} = {o.value!r}: {o.why}" for o in node.overrides()),
        *(f"[plan] {line}" for line in [*node.plan.lines, node.plan.verdict]),
        f"[node] planned peak (the trainer's allocator, verl's max_memory_allocated): {node.plan.allocated_gib:.2f} GiB",
    ]


def shape_folder(node: NodeConfig, folder: Path) -> str:
    """A model folder of the node run's shape for the proof: the committed models/<hub id>/ files (config.json at the
    run's depth); the run itself proves against the model it builds."""
    shutil.copytree(catalog.model_config_dir(node.hub_id), folder, dirs_exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(with_layers(config, node.layers), indent=1))
    return str(folder)


def dry_run(recipe: Recipe, gpus: int, args: str | None) -> int:
    from verl_recipes.check.preflight import fallback_overrides
    from verl_recipes.check.recipe import check

    node = compose_node(recipe, gpus, args)
    print("\n".join(describe(node)))
    fallbacks = [override for override, _ in fallback_overrides(node.cfg, lambda module: False)]
    failed = 0
    with tempfile.TemporaryDirectory() as folder:
        model = shape_folder(node, Path(folder))
        for label, extra in (("as composed", []), (f"without flash-attn or apex ({' '.join(fallbacks)})", fallbacks)):
            errors = check(node.on_machine, [*node.args(model), *extra])
            failed += bool(errors)
            print(f"[node] {'FAIL' if errors else 'ok'}: {recipe.label} node config at G={gpus}, {label}"
                  + "".join(f"\n[node]   {error}" for error in errors))
    return 1 if failed else 0


def plugins_missing() -> list[str]:
    """The measuring plugins verl would not load here (it loads only installed `verl.plugins` entry points)."""
    installed = {entry.value for entry in importlib.metadata.entry_points(group="verl.plugins")}
    return [plugin for plugin in PLUGINS if plugin not in installed]


def in_child(function, *args):
    """`function(*args)` in a fresh process: whatever it does with CUDA ends with it. A CUDA context this process
    kept would hold ~0.6 GiB of GPU 0 through the whole run, which the first 7B node run's vLLM needed (OOM)."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(function, args)


def node_hardware(gpus: int) -> tuple[str, float]:
    """("<G>x<card>", e.g. 4xh200, and GiB per card) of this node's GPU 0 (run it in_child)."""
    import torch

    if not torch.cuda.is_available():
        raise RecipeError("no CUDA GPU here: a node run needs one (make <recipe>-node DRY=1 proves it on any machine)")
    name = torch.cuda.get_device_name(0)
    found = GPU_NAMES.search(name)
    card = (found.group(1) if found else re.sub(r"\W+", "-", name)).lower()
    return f"{gpus}x{card}", torch.cuda.get_device_properties(0).total_memory / 2**30


def model_folder(work: Path, node: NodeConfig) -> Path:
    """The built model, reused by a later run of the same shape (a 30B build writes 61 GB)."""
    from verl_recipes.node.inputs import build_model

    folder = work / f"model-{node.hub_id.replace('/', '--')}-{node.layers or 'all'}-layers"
    if not (folder / ".built").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        in_child(build_model, folder, node.hub_id, node.layers)
        (folder / ".built").touch()
    return folder


def run(recipe: Recipe, gpus: int, args: str | None) -> int:
    from verl_recipes.compose import compose
    from verl_recipes.launch import launch
    from verl_recipes.node import inputs, record
    from verl_recipes.planner import plan
    from verl_recipes.runtime import phase_memory

    started = time.time()
    missing = plugins_missing()
    if missing:
        raise RecipeError(f"verl would not load {', '.join(missing)} (the record's memory phases and preemptions): "
                          f"reinstall the package's entry points, `pip install --no-deps -e .`")
    work = Path(os.environ.get("RL_NODE_WORK", "/tmp/verl-node")).resolve()
    os.environ["RL_DATA_DIR"] = str(work / "data" / recipe.run_name)
    node = compose_node(recipe, gpus, args)
    print("\n".join(describe(node)), flush=True)
    hardware, gpu_gib = in_child(node_hardware, gpus)
    model = model_folder(work, node)
    datasets = recipe.card_value("data", [])
    inputs.write_prompts(compose(recipe, node.args(str(model))), datasets, Path(os.environ["RL_DATA_DIR"]))
    phases_dir = work / "phase-memory" / recipe.run_name
    shutil.rmtree(phases_dir, ignore_errors=True)
    phases_dir.mkdir(parents=True)
    os.environ.update({PHASE_MEMORY_ENV: str(phases_dir), PREEMPTIONS_ENV: "1"})
    # a node run never resumes: each gets a fresh run folder
    rc, launch_dir, cfg = launch(recipe_on(recipe, gpu_gib), node.args(str(model)), tag="-node", mode="never")
    planned = plan(cfg, model, gpu_gib)  # the planner on the launched config and the built model
    result = record.build(node, str(model), cfg, planned, rc, launch_dir, phase_memory.read(phases_dir), hardware,
                          time.time() - started)
    folder, stem = catalog.root() / "results" / "node", record.name(recipe.name, recipe.variant, hardware)
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1, default=str)
    (folder / f"{stem}.json").write_text(text)
    # every run kept: the record above is the latest, results/node/history/ holds each one, failures included
    (folder / "history").mkdir(exist_ok=True)
    (folder / "history" / f"{stem}.{time.strftime('%Y%m%d-%H%M', time.gmtime(started))}.json").write_text(text)
    if (launch_dir / "metrics.jsonl").is_file():
        shutil.copy(launch_dir / "metrics.jsonl", folder / f"{stem}.metrics.jsonl")
    print(f"[node] {recipe.label} on {hardware}: {'PASS' if result['passed'] else 'FAIL'}, peak "
          f"{result['peak_memory_gib']} GiB against the plan's {planned.allocated_gib:.2f} -> {folder / stem}.json")
    for failure in result["failures"]:
        print(f"[node]   gate failed: {failure}")
    return 0 if result["passed"] else 1

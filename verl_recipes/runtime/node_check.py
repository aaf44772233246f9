"""The first step of a cluster job (`python -m verl_recipes.runtime.node_check`, run in the job's working dir):
prove on every node, before verl starts, what verl_recipes/check/preflight.py planned at submission
(node_check.json beside the job's config.yaml): verl's version, that the reward, tools and hooks the config
names import, that the shared paths are visible, and that the packages the config needs are installed.

It ships with the job, so it imports nothing of verl_recipes outside runtime/.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import ray
from omegaconf import DictConfig, OmegaConf

from verl_recipes.runtime.modules import module_found

PLAN = "node_check.json"
CONFIG = "config.yaml"
TIMEOUT_S = 600  # a fresh node downloads the job's code first


def node_problems(plan: dict) -> list[str]:
    """What stops this node from running the job; empty when nothing does."""
    problems = []
    try:
        installed = version("verl")
    except PackageNotFoundError:
        installed = "none"
    if installed != plan["verl"]:
        problems.append(f"verl {installed} is installed; the recipes are proven against verl {plan['verl']}")
    for obj in plan["objects"]:
        module, _, attr = obj.partition(":")
        try:
            loaded = importlib.import_module(module)
            if attr:
                getattr(loaded, attr)
        except Exception as err:  # any import failure is the finding
            problems.append(f"{obj} does not import ({type(err).__name__}: {err})")
    for path in plan["paths"]:
        if not os.path.exists(path):
            problems.append(f"{path} is not visible here: put data, runs (RL_RUNS_DIR) and local models on "
                            f"storage every node mounts at the same path")
    problems += [f"python module '{module}' is missing: install {hint}"
                 for module, hint in plan["packages"].items() if not module_found(module)]
    return problems


@ray.remote(num_cpus=0)
def _node_report(plan: dict) -> tuple[list[str], str]:
    return node_problems(plan), str(Path(__file__).resolve().parents[2])


class NodeCheckError(RuntimeError):
    pass


@ray.remote(num_cpus=0)
class NodeCheck:
    """Stands in for verl's TaskRunner: verl's own run_ppo starts it, so its tasks run in the runtime env that
    verl gives its workers, and a node check that passes proves our code reaches them."""

    def run(self, config: DictConfig) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        plan = json.loads(Path(PLAN).read_text())
        nodes = [node for node in ray.nodes() if node["Alive"]]
        reports = [_node_report.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                   .remote(plan) for node in nodes]
        failed = []
        for node, report in zip(nodes, reports, strict=True):
            name = f"{node['NodeManagerAddress']} {node['NodeID'][:8]} ({int(node['Resources'].get('GPU', 0))} GPUs)"
            try:
                problems, code_dir = ray.get(report, timeout=TIMEOUT_S)
            except Exception as err:  # the runtime env setup or the node itself failed
                problems, code_dir = [f"the check did not run ({type(err).__name__}: {str(err).splitlines()[0]})"], "-"
            failed += [f"node {name}: {problem}" for problem in problems]
            if not problems:
                print(f"[cluster] node {name} ok: verl {plan['verl']}; imports {', '.join(plan['objects'])}; "
                      f"sees {len(plan['paths'])} shared path(s); code from {code_dir}", flush=True)
        if failed:
            raise NodeCheckError("the cluster cannot run this job:\n  " + "\n  ".join(failed))


def main() -> int:
    from ray.exceptions import RayTaskError
    from verl.trainer.main_ppo import run_ppo

    try:
        run_ppo(OmegaConf.load(CONFIG), task_runner_class=NodeCheck)
    except RayTaskError as err:
        print(f"[cluster] {err.cause}", file=sys.stderr, flush=True)
        return 1
    alive = sum(node["Alive"] for node in ray.nodes())
    print(f"[cluster] all {alive} node(s) ready", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

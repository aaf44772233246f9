"""Run a recipe on an existing Ray cluster (`make <recipe> CLUSTER=http://<head>:8265`), and the cluster helpers
that scripts/slurm/recipe.sbatch calls.

The job carries what it runs: the run folder's job/ directory holds a copy of this repo's code folders and the
resolved config, and is the Ray job's working_dir. Ray unpacks it on every node and starts every worker of the
job in it with it first on PYTHONPATH, the workers verl creates included: verl only clears the working_dir
when the job has none (verl/trainer/constants_ppo.py, get_ppo_ray_runtime_env).

Before verl starts, the job checks every node (`python -m scripts.cluster check-nodes`): verl's version, the
reward and tool classes import, the recipe composes, the trainer's packages are installed and the data, the run
folder and local model folders are visible at the same path (shared storage).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import shutil
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import ray
import yaml
from omegaconf import DictConfig, OmegaConf

from scripts import catalog
from scripts.catalog import REPO, Recipe, RecipeError, root
from scripts.compose import compose, flatten, to_yaml
from scripts.verl_keys import VERL_VERSION

# What a job needs of the repo: the code its workers import, and what the node check composes recipes from.
CODE = ("rewards", "agents", "scripts")
RECIPE_TREE = ("recipes", "configs", "models")
MAX_SHIPPED_FILE_MB = 20  # a job ships code and configs to every node; weights and data stay on shared storage
JOB = "job"  # in the run folder: the job's working_dir
CONFIG_NAME = "config"  # the job's resolved config, config.yaml in its working_dir
CONFIG = f"{CONFIG_NAME}.yaml"
PLAN = "node_check.json"  # what check-nodes proves on every node
# The user's settings that the job's processes need too; HF_TOKEN is left out on purpose: a job's env is shown
# by the dashboard, so a token belongs in the nodes' own environment (the SLURM env hook).
FORWARDED_ENV = ("HF_HOME", "HF_HUB_OFFLINE", "HF_ENDPOINT", "TOKENIZERS_PARALLELISM", "GLOO_SOCKET_IFNAME")
FORWARDED_PREFIXES = ("NCCL_",)
NODE_CHECK_TIMEOUT_S = 600  # a fresh node downloads the job's code first


def dashboard_url(address: str) -> str:
    """CLUSTER is the head's dashboard (job server) address; `host:8265` means http://host:8265."""
    return address if "://" in address else f"http://{address}"


# ---------------------------------------------------------------- the cluster's GPUs


def cluster_nodes(address: str) -> list[dict]:
    """Alive nodes, read over the dashboard's HTTP state API: works from any machine that reaches the head."""
    from ray.util.state import list_nodes

    try:
        nodes = list_nodes(address=dashboard_url(address), filters=[("state", "=", "ALIVE")], timeout=30)
    except Exception as err:  # refused, no dashboard, timeout: all mean CLUSTER does not point at a live head
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RecipeError(
            f"cannot reach a Ray cluster at {address} ({reason}). CLUSTER is the head's dashboard address, "
            f"http://<head>:8265: start a head with `ray start --head --dashboard-host=0.0.0.0`, or let "
            f"scripts/slurm/recipe.sbatch start the cluster"
        ) from None
    return [{"id": n.node_id, "ip": n.node_ip, "gpus": int((n.resources_total or {}).get("GPU", 0))} for n in nodes]


def gpu_pools(cfg: DictConfig) -> list[tuple[str, int, int]]:
    """(pool, nodes, GPUs per node) of every GPU pool verl places (verl/trainer/ppo/v1/trainer_base.py:818-845)."""
    pools = [("trainer", cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node)]
    # fully_async_main copies the top-level rollout.* over actor_rollout_ref.rollout.* (fully_async_main.py:235)
    rollout = cfg.get("rollout") or cfg.actor_rollout_ref.rollout
    if rollout.get("nnodes"):
        pools.append(("standalone rollout", rollout.nnodes, rollout.n_gpus_per_node))
    reward_model = cfg.reward.reward_model
    if reward_model.enable_resource_pool:
        pools.append(("reward model", reward_model.nnodes, reward_model.n_gpus_per_node))
    distillation = cfg.get("distillation")
    if distillation is not None and distillation.get("enabled"):
        pools.append(("distillation teacher", distillation.nnodes, distillation.n_gpus_per_node))
    return [(name, int(nodes), int(gpus)) for name, nodes, gpus in pools]


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def topology_errors(pools: list[tuple[str, int, int]], nodes: list[dict], address: str) -> list[str]:
    """What the cluster lacks for the recipe's pools: GPUs in total, then nodes with enough GPUs each."""
    declared = sum(count * gpus for _, count, gpus in pools)
    have = sum(node["gpus"] for node in nodes)
    inventory = ", ".join(f"{node['ip']}: {node['gpus']} GPUs" for node in nodes) or "no alive node"
    if have < declared:
        if len(pools) == 1:
            parts = f"{_nodes(pools[0][1])} x {pools[0][2]} GPUs"
        else:
            parts = " + ".join(f"{name} {_nodes(count)} x {gpus} GPUs" for name, count, gpus in pools)
        return [f"the recipe declares {parts} = {declared} GPUs; the cluster at {address} has {have} ({inventory})"]
    errors = []
    for name, count, gpus in pools:  # verl packs each node's share of a pool onto one node (STRICT_PACK)
        fitting = sum(node["gpus"] >= gpus for node in nodes)
        if fitting < count:
            errors.append(f"the {name} pool needs {_nodes(count)} with {gpus} GPUs each; the cluster at {address} "
                          f"has {fitting} such node(s) ({inventory})")
    return errors


def cluster_gpu_errors(address: str, cfg: DictConfig) -> list[str]:
    """Preflight for `make <recipe> CLUSTER=...`: empty when the cluster has the GPUs the recipe declares."""
    return topology_errors(gpu_pools(cfg), cluster_nodes(address), address)


def wait_for_nodes(address: str, count: int, timeout_s: float = 600) -> list[dict]:
    """Block until `count` nodes are alive (each node brings all its GPUs when it joins)."""
    deadline = time.monotonic() + timeout_s
    nodes, last_error = [], ""
    while True:
        try:
            nodes, last_error = cluster_nodes(address), ""
        except RecipeError as err:  # the head's dashboard may still be starting
            last_error = f" (last error: {err})"
        if len(nodes) >= count:
            return nodes
        if time.monotonic() > deadline:
            joined = ", ".join(f"{n['ip']}: {n['gpus']} GPUs" for n in nodes) or "none"
            raise RecipeError(f"only {len(nodes)} of {count} nodes joined the Ray cluster at {address} within "
                              f"{timeout_s:.0f} s (joined: {joined}){last_error}; read the Ray worker logs")
        time.sleep(2)


# ---------------------------------------------------------------- what the job carries


def required_objects(cfg: DictConfig) -> list[str]:
    """`module:attribute` of the reward function and every tool class the config names: what workers import."""
    out = []
    reward = cfg.reward.custom_reward_function
    if reward.path and str(reward.path).startswith("pkg://"):
        module = str(reward.path).removeprefix("pkg://").replace("/", ".")
        out.append(f"{module}:{reward.name}" if reward.name else module)
    tool_config = cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path
    if tool_config:
        path = Path(str(tool_config))
        path = path if path.is_absolute() else REPO / path  # relative: resolved in the job's copy of the repo
        for tool in (yaml.safe_load(path.read_text()) or {}).get("tools") or []:
            module, _, cls = str(tool["class_name"]).rpartition(".")
            out.append(f"{module}:{cls}")
    return out


def _map_strings(node, fn):
    if isinstance(node, dict):
        return {key: _map_strings(value, fn) for key, value in node.items()}
    if isinstance(node, list):
        return [_map_strings(value, fn) for value in node]
    return fn(node) if isinstance(node, str) else node


def job_config(cfg: DictConfig) -> DictConfig:
    """The config as the job runs it: paths into the shipped folders become relative to the job's working dir,
    where every worker starts (verl resolves relative tool configs there: utils/import_utils.py)."""
    prefixes = tuple(f"{REPO}/{name}/" for name in CODE + RECIPE_TREE)

    def relative(value: str) -> str:
        return value[len(f"{REPO}/"):] if value.startswith(prefixes) else value

    return OmegaConf.create(_map_strings(OmegaConf.to_container(cfg, resolve=True), relative))


def shared_paths(cfg: DictConfig, run_dir: Path) -> list[str]:
    """The run folder and every absolute path in the config that exists here: every node must see them."""
    values = []
    for leaf in flatten(cfg).values():
        values += leaf if isinstance(leaf, list) else [leaf]
    found = {v for v in values if isinstance(v, str) and os.path.isabs(v) and os.path.exists(v)}
    return [str(run_dir)] + sorted(found - {str(run_dir)})


def _refuse_big_files(folder: str, names: list[str]) -> set[str]:
    for name in names:
        path = Path(folder) / name
        if path.is_file() and path.stat().st_size > MAX_SHIPPED_FILE_MB * 2**20:
            raise RecipeError(f"{path} is {path.stat().st_size / 2**20:.0f} MiB: a cluster job copies "
                              f"{', '.join(CODE + RECIPE_TREE)} to every node, so keep weights and data out of them")
    return {name for name in names if name == "__pycache__" or name.endswith(".pyc")}


def pack_job(cfg: DictConfig, run_dir: Path, plan: dict) -> Path:
    """Write run_dir/job/: the code folders, the recipe tree, the job's config and the node-check plan."""
    job = run_dir / JOB
    for name in CODE + RECIPE_TREE:
        source = (REPO if name in CODE else root()) / name
        shutil.copytree(source, job / name, ignore=_refuse_big_files)
    (job / CONFIG).write_text(to_yaml(cfg))
    (job / PLAN).write_text(json.dumps(plan, indent=2) + "\n")
    return job


def job_env(run_dir: Path) -> dict:
    """Env vars of every process of the job. No PYTHONPATH: a head path means nothing on other nodes, and Ray
    puts each node's copy of the working_dir first on it."""
    env = {k: v for k, v in os.environ.items() if k in FORWARDED_ENV or k.startswith(FORWARDED_PREFIXES)}
    env["VERL_FILE_LOGGER_PATH"] = os.environ.get("VERL_FILE_LOGGER_PATH", str(run_dir / "metrics.jsonl"))
    # verl's ray.init adds env vars (and py_executable) to the job's runtime env; Ray refuses any overlap with
    # the job's own keys (a forwarded NCCL_ALGO, say) unless told to let verl's value win.
    env["RAY_OVERRIDE_JOB_RUNTIME_ENV"] = "1"
    return env


def job_command(recipe: Recipe, run_dir: Path, train: bool = True) -> str:
    """The job's shell command (Ray runs it in the working_dir): the node check, then verl on the shipped config.
    `python` is the one on the PATH Ray was started with: activate the venv before `ray start`."""
    check = "python -m scripts.cluster check-nodes"
    if not train:
        return check
    return (f'{check} && python -m {recipe.entrypoint} --config-path="$PWD" --config-name={CONFIG_NAME} '
            f"{shlex.quote(f'hydra.run.dir={run_dir}')}")


def job_id(recipe: Recipe, run_dir: Path) -> str:
    """The Ray submission id: the run name and the run folder's time stamp, so a job names its folder."""
    return f"{recipe.run_name}-{run_dir.name}"


def submit(recipe: Recipe, cfg: DictConfig, run_dir: Path, address: str, follow: bool = True, train: bool = True,
           also_import: list[str] = ()) -> int:
    """Submit the recipe (composed and proven as `cfg`, written to run_dir) as a Ray job to the cluster at
    `address`; with follow, stream its logs and return its exit code.

    train=False runs only the node check; also_import adds `module:attribute`s for it to import on every node
    (tests prove every recipe's reward and tools that way).
    """
    from ray.job_submission import JobSubmissionClient

    shipped = job_config(cfg)
    plan = {
        "recipe": recipe.label,
        "objects": list(dict.fromkeys(required_objects(shipped) + list(also_import))),
        "paths": shared_paths(shipped, run_dir),
        "packages": train,
    }
    job_dir = pack_job(shipped, run_dir, plan)
    print("[cluster] every node must see these paths (shared storage); the job checks that before verl starts:\n  "
          + "\n  ".join(plan["paths"]), flush=True)
    try:
        client = JobSubmissionClient(dashboard_url(address))
    except Exception as err:  # any failure here means no job server at that address
        raise RecipeError(f"no Ray job server at {address} ({err}); CLUSTER is http://<head>:8265") from None
    job = client.submit_job(
        entrypoint=job_command(recipe, run_dir, train),
        submission_id=job_id(recipe, run_dir),
        runtime_env={"working_dir": str(job_dir), "env_vars": job_env(run_dir)},
        metadata={"recipe": recipe.label, "run_dir": str(run_dir)},
    )
    stop = f"ray job stop {job} --address {dashboard_url(address)}"
    print(f"[cluster] submitted {recipe.label} as job {job} to {address}\n"
          f"[cluster] logs: ray job logs -f {job} --address {dashboard_url(address)}\n[cluster] stop: {stop}",
          flush=True)
    return follow_job(client, job, stop) if follow else 0


def follow_job(client, job: str, stop: str) -> int:
    """Stream the job's logs until it ends; Ctrl-C stops following, not the job."""
    import asyncio

    from ray.job_submission import JobStatus

    async def tail() -> None:
        async for lines in client.tail_job_logs(job):
            print(lines, end="", flush=True)

    try:
        asyncio.run(tail())
        while not client.get_job_status(job).is_terminal():
            time.sleep(1)
    except KeyboardInterrupt:
        print(f"\n[cluster] stopped following; job {job} goes on. To stop it: {stop}")
        return 130
    info = client.get_job_info(job)
    if info.status == JobStatus.SUCCEEDED:
        print(f"[cluster] job {job} SUCCEEDED")
        return 0
    reason = "".join((info.message or "").splitlines()[:1])  # the rest of Ray's message repeats the logs
    print(f"[cluster] job {job} {info.status}: {reason}")
    return info.driver_exit_code or 1


# ---------------------------------------------------------------- inside the job: check every node


def node_problems(plan: dict, cfg: DictConfig) -> list[str]:
    """What stops this node from running the job; empty when nothing does. Runs on every node."""
    from scripts.launch import missing_packages

    problems = []
    try:
        installed = version("verl")
    except PackageNotFoundError:
        installed = "none"
    if installed != VERL_VERSION:
        problems.append(f"verl {installed} is installed; the recipes are proven against verl {VERL_VERSION}")
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
    try:
        compose(catalog.parse(plan["recipe"]))
    except RecipeError as err:
        problems.append(str(err))
    if plan["packages"]:
        problems += missing_packages(cfg)
    return problems


@ray.remote(num_cpus=0)
def _node_report(plan: dict, cfg: DictConfig) -> tuple[list[str], str]:
    return node_problems(plan, cfg), str(Path(catalog.__file__).parent.parent)


@ray.remote(num_cpus=0)
class NodeCheck:
    """Stands in for verl's TaskRunner: verl's own run_ppo starts it, so its tasks run in the runtime env that
    verl gives its workers, and a node check that passes proves our code reaches them."""

    def run(self, config: DictConfig) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        plan = json.loads(Path(PLAN).read_text())
        nodes = [node for node in ray.nodes() if node["Alive"]]
        reports = [_node_report.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                   .remote(plan, config) for node in nodes]
        failed = []
        for node, report in zip(nodes, reports, strict=True):
            name = f"{node['NodeManagerAddress']} {node['NodeID'][:8]} ({int(node['Resources'].get('GPU', 0))} GPUs)"
            try:
                problems, code_dir = ray.get(report, timeout=NODE_CHECK_TIMEOUT_S)
            except Exception as err:  # the runtime env setup or the node itself failed
                problems, code_dir = [f"the check did not run ({type(err).__name__}: {str(err).splitlines()[0]})"], "-"
            failed += [f"node {name}: {problem}" for problem in problems]
            if not problems:
                print(f"[cluster] node {name} ok: verl {VERL_VERSION}; imports {', '.join(plan['objects'])}; "
                      f"composes {plan['recipe']}; sees {len(plan['paths'])} shared path(s); "
                      f"code from {code_dir}", flush=True)
        if failed:
            raise RecipeError("the cluster cannot run this job:\n  " + "\n  ".join(failed))


def check_nodes() -> int:
    """`python -m scripts.cluster check-nodes`, the job's first step, run in its working dir."""
    from ray.exceptions import RayTaskError
    from verl.trainer.main_ppo import run_ppo

    try:
        run_ppo(OmegaConf.load(CONFIG), task_runner_class=NodeCheck)
    except RayTaskError as err:
        print(f"[cluster] {err.cause}", file=sys.stderr, flush=True)
        return 1
    print(f"[cluster] all {_nodes(sum(node['Alive'] for node in ray.nodes()))} ready", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check-nodes", help=f"inside a job: check every node ({CONFIG} and {PLAN} in the working dir)")
    wait = sub.add_parser("wait-nodes", help="wait until N nodes have joined the Ray cluster")
    wait.add_argument("--address", required=True, help="the head's dashboard, http://<head>:8265")
    wait.add_argument("--nodes", type=int, required=True)
    wait.add_argument("--timeout", type=float, default=600, help="seconds")
    ns = parser.parse_args(argv)
    try:
        if ns.command == "check-nodes":
            return check_nodes()
        nodes = wait_for_nodes(ns.address, ns.nodes, ns.timeout)
        print(f"[cluster] {_nodes(len(nodes))}, {sum(n['gpus'] for n in nodes)} GPUs: "
              + ", ".join(f"{n['ip']} ({n['gpus']})" for n in nodes), flush=True)
        return 0
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

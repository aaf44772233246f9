from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from verl_recipes import entrypoints
from verl_recipes.catalog import REPO, Recipe, RecipeError
from verl_recipes.check.preflight import SHIPPED, cluster_gpu_problems, node_plan
from verl_recipes.compose import to_yaml
from verl_recipes.runtime import node_check

MAX_SHIPPED_FILE_MB = 20  # a job ships code and configs to every node; weights and data stay on shared storage
JOB = "job"  # in the run folder: the job's working_dir
CONFIG_NAME = "config"  # the job's resolved config, config.yaml in its working_dir
CONFIG = node_check.CONFIG
PLAN = node_check.PLAN
# The user's settings that the job's processes need too; HF_TOKEN is left out on purpose: a job's env is shown
# by the dashboard, so a token belongs in the nodes' own environment (the SLURM env hook).
FORWARDED_ENV = ("HF_HOME", "HF_HUB_OFFLINE", "HF_ENDPOINT", "TOKENIZERS_PARALLELISM", "GLOO_SOCKET_IFNAME")
FORWARDED_PREFIXES = ("NCCL_",)


def dashboard_url(address: str) -> str:
    """CLUSTER is the head's dashboard (job server) address; `host:8265` means http://host:8265."""
    return address if "://" in address else f"http://{address}"


TOKEN_HINT = ("the cluster runs Ray's token authentication: give this shell the head's token, `export "
              "RAY_AUTH_TOKEN=<the token>` or `export RAY_AUTH_TOKEN_PATH=<a file holding it>` (the head's "
              "~/.ray/auth_token, or the file scripts/slurm/recipe.sbatch names), and run again")


def use_cluster_token() -> None:
    """Send the token this shell has (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) to the cluster. Ray's
    clients send one only in token mode, which a process that starts no cluster never turns on by itself (Ray 2.60);
    a cluster without token mode ignores it. RAY_AUTH_MODE, when set, is kept."""
    from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available

    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def unreachable(address: str, err: Exception) -> RecipeError:
    """What CLUSTER must be, or that the cluster wants a token this shell did not send."""
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if "Authentication" in str(err) or "auth token" in str(err).lower():
        return RecipeError(f"the Ray cluster at {address} refused this shell ({reason}): {TOKEN_HINT}")
    return RecipeError(
        f"cannot reach a Ray cluster at {address} ({reason}). CLUSTER is the head's dashboard address, "
        f"http://<head>:8265: start a head with `ray start --head --dashboard-host=0.0.0.0`, or let "
        f"scripts/slurm/recipe.sbatch start the cluster"
    )


# ---------------------------------------------------------------- the cluster's GPUs


def cluster_nodes(address: str) -> list[dict]:
    """Alive nodes, read over the dashboard's HTTP state API: works from any machine that reaches the head."""
    from ray.util.state import list_nodes

    use_cluster_token()
    try:
        nodes = list_nodes(address=dashboard_url(address), filters=[("state", "=", "ALIVE")], timeout=30)
    except Exception as err:  # refused, no dashboard, timeout, no token: CLUSTER does not point at a head we may use
        raise unreachable(address, err) from None
    return [{"id": n.node_id, "ip": n.node_ip, "gpus": int((n.resources_total or {}).get("GPU", 0))} for n in nodes]


def cluster_gpu_errors(address: str, cfg: DictConfig, recipe: Recipe) -> list[str]:
    """Preflight for `make <recipe> CLUSTER=...`: empty when the cluster has the GPUs the recipe declares."""
    pools = entrypoints.gpu_pools(cfg, entrypoints.get(recipe.entrypoint))
    return cluster_gpu_problems(pools, cluster_nodes(address), address)


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


def _map_strings(node, fn):
    if isinstance(node, dict):
        return {key: _map_strings(value, fn) for key, value in node.items()}
    if isinstance(node, list):
        return [_map_strings(value, fn) for value in node]
    return fn(node) if isinstance(node, str) else node


def job_config(cfg: DictConfig) -> DictConfig:
    """The config as the job runs it: paths into the shipped folders become relative to the job's working dir,
    where every worker starts (verl resolves relative tool configs there: utils/import_utils.py)."""
    def relative(value: str) -> str:
        for source, target in SHIPPED.items():
            if value.startswith(f"{REPO}/{source}/"):
                return target + value[len(f"{REPO}/{source}"):]
        return value

    return OmegaConf.create(_map_strings(OmegaConf.to_container(cfg, resolve=True), relative))


def _refuse_big_files(folder: str, names: list[str]) -> set[str]:
    for name in names:
        path = Path(folder) / name
        if path.is_file() and path.stat().st_size > MAX_SHIPPED_FILE_MB * 2**20:
            raise RecipeError(f"{path} is {path.stat().st_size / 2**20:.0f} MiB: a cluster job copies "
                              f"{', '.join(SHIPPED)} to every node, so keep weights and data out of it")
    return {name for name in names if name == "__pycache__" or name.endswith(".pyc")}


def pack_job(cfg: DictConfig, run_dir: Path, plan: dict) -> Path:
    """Write run_dir/job/: the runtime part of the package, the job's config and the node-check plan."""
    job = run_dir / JOB
    for name, shipped in SHIPPED.items():
        source, target = REPO / name, job / shipped
        if source.is_dir():
            shutil.copytree(source, target, ignore=_refuse_big_files)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
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
    check = "python -m verl_recipes.runtime.node_check"
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
    plan = node_plan(recipe.label, shipped, run_dir, train, also_import)
    job_dir = pack_job(shipped, run_dir, plan)
    print("[cluster] every node must see these paths (shared storage); the job checks that before verl starts:\n  "
          + "\n  ".join(plan["paths"]), flush=True)
    use_cluster_token()
    try:
        client = JobSubmissionClient(dashboard_url(address))
    except Exception as err:  # no job server at that address, or one that wants a token
        raise unreachable(address, err) from None
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_recipes.cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    wait = sub.add_parser("wait-nodes", help="wait until N nodes have joined the Ray cluster (the SLURM template)")
    wait.add_argument("--address", required=True, help="the head's dashboard, http://<head>:8265")
    wait.add_argument("--nodes", type=int, required=True)
    wait.add_argument("--timeout", type=float, default=600, help="seconds")
    ns = parser.parse_args(argv)
    try:
        nodes = wait_for_nodes(ns.address, ns.nodes, ns.timeout)
        print(f"[cluster] {len(nodes)} node(s), {sum(n['gpus'] for n in nodes)} GPUs: "
              + ", ".join(f"{n['ip']} ({n['gpus']})" for n in nodes), flush=True)
        return 0
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

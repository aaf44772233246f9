"""Recipes on a Ray cluster (verl_recipes/cluster.py): a real two-node Ray cluster on this machine (CPU only, two
`ray start` processes, in Ray's token authentication mode) runs a job through `submit`, whose first step checks every
node with the code the job ships; a shell without the token is told how to pass it; plus the GPU preflight, the node
check's findings and what the job carries, without Ray."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from verl_recipes import catalog, cluster, entrypoints, pins, supervisor
from verl_recipes.catalog import REPO, RecipeError
from verl_recipes.check.preflight import (
    cluster_gpu_problems,
    missing_packages,
    node_plan,
    required_objects,
    required_packages,
    shared_paths,
)
from verl_recipes.compose import compose
from verl_recipes.entrypoints import Pool
from verl_recipes.launch import plan_launch, write_launch
from verl_recipes.runtime.node_check import node_problems

QWEN = "qwen25-7b-grpo"
CODE_INTERPRETER = "agents/code_interpreter.yaml"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _processes_in_sessions(sessions: set[int]) -> list:
    """Processes whose session is one of ours: each `ray start` runs in its own session, and so does all it spawns."""
    return [proc for sid in sessions for proc in supervisor.session(sid)]


@pytest.fixture(scope="module")
def ray_cluster():
    """A head (with the dashboard: the job server) and one worker node, both `ray start --block` on this machine,
    with their own temp dir and ports. Yields `ready()`, which waits for both nodes and returns the address, so
    a test can compose recipes while Ray starts. Teardown ends exactly these processes and proves none is left."""
    temp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    gcs, dashboard, client, head_agent, worker_agent = (_free_port() for _ in range(5))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("RAY_")}
    # token mode, as scripts/slurm/recipe.sbatch starts its clusters; HOME here, so Ray writes nothing to the real one
    # (a ~/.ray/auth_token left there turns every later `ray start` on this machine to token mode)
    token = uuid.uuid4().hex
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, HOME=str(temp))
    saved_token = os.environ.get("RAY_AUTH_TOKEN")
    os.environ["RAY_AUTH_TOKEN"] = token  # this shell has the token: cluster.use_cluster_token sends it
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # as if the venv were activated
    common = ["--block", "--num-cpus=1", "--num-gpus=0", f"--temp-dir={temp}", "--disable-usage-stats",
              "--node-ip-address=127.0.0.1"]
    procs = []

    def start(args: list[str], log: str) -> None:
        with open(temp / log, "w") as out:  # nothing of the repo on PYTHONPATH, cwd outside it: code comes by the job
            procs.append(subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", *common, *args],
                                          cwd=temp, env=env, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True))

    address = f"http://127.0.0.1:{dashboard}"
    try:
        start(["--head", f"--port={gcs}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
               f"--dashboard-port={dashboard}", f"--ray-client-server-port={client}",
               f"--dashboard-agent-listen-port={head_agent}"], "head.log")
        # the worker retries until the head's GCS answers, so both start at once
        start([f"--address=127.0.0.1:{gcs}", f"--dashboard-agent-listen-port={worker_agent}"], "worker.log")

        def ready() -> str:
            try:
                cluster.wait_for_nodes(address, 2, timeout_s=90)
            except RecipeError as err:
                logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(temp.glob("*.log")))
                pytest.fail(f"could not start a two-node Ray cluster here: {err}\n{logs}")
            return address

        yield ready
    finally:
        if saved_token is None:
            os.environ.pop("RAY_AUTH_TOKEN", None)
        else:
            os.environ["RAY_AUTH_TOKEN"] = saved_token
        sessions = {proc.pid for proc in procs}
        for proc in procs:  # SIGTERM to `ray start --block`: its reaper ends the node's processes
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while _processes_in_sessions(sessions) and time.monotonic() < deadline:
            time.sleep(1)
        leftovers = _processes_in_sessions(sessions)
        for proc in leftovers:
            os.kill(proc.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
        assert not leftovers, f"Ray processes outlived their node: {[p.pid for p in leftovers]}"


@pytest.mark.slow
def test_job_checks_every_node_with_the_code_it_ships(ray_cluster, run_env, monkeypatch, capsys):
    # the pinned resolved configs are the composed ones (tests/test_pins.py proves it); reading them saves a compose each
    # (an unpublished copy has no pin)
    pinned = [OmegaConf.create(yaml.safe_load(pins.pin_file(r).read_text().replace("<repo>", str(REPO))))
              if r.published else compose(r) for r in catalog.all_recipes()]
    expected = sorted({obj for cfg in pinned for obj in required_objects(cfg)})
    assert any(obj.startswith("verl_recipes.rewards.") for obj in expected)
    # verl's ray.init forwards NCCL_ALGO too: the job must merge its runtime env with verl's, not clash
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    recipe = catalog.get(QWEN)
    cfg = compose(recipe)
    plan = plan_launch(recipe, [], dry=True)
    write_launch(plan)
    run_dir = plan.launch_dir
    address = ray_cluster()

    code = cluster.submit(recipe, cfg, run_dir, address, train=False, also_import=expected)

    out = capsys.readouterr().out
    assert code == 0, out
    assert f"ray job stop {cluster.job_id(recipe, run_dir)} --address {address}" in out
    reports = {m.group(1): m.group(2) for m in re.finditer(r"\[cluster\] node \S+ (\w{8}) \(0 GPUs\) ok: (.*)", out)}
    assert len(reports) == 2, out  # head and worker
    for report in reports.values():
        assert all(obj in report for obj in expected), report
        shipped_from = report.split("code from ")[1]
        assert "runtime_resources/working_dir_files" in shipped_from and not shipped_from.startswith(str(REPO))
    job = run_dir / cluster.JOB
    assert (job / "verl_recipes/rewards/math.py").is_file() and (job / cluster.CONFIG).is_file()
    # the job ships the runtime part, rewards and agents only: no launcher, no checks, no recipe tree
    assert sorted(p.name for p in (job / "verl_recipes").iterdir()) == ["__init__.py", "agents", "rewards", "runtime"]
    assert not (job / "recipes").exists() and not (job / "configs").exists()


@pytest.mark.slow
def test_preflight_names_the_missing_gpus_of_a_live_cluster(ray_cluster):
    cfg = compose(catalog.get(QWEN))
    address = ray_cluster()
    [error] = cluster.cluster_gpu_errors(address, cfg, catalog.get(QWEN))
    assert error.startswith(f"the recipe declares 1 node x 8 GPUs = 8 GPUs; the cluster at {address} has 0 (")
    with pytest.raises(RecipeError, match=r"only 2 of 3 nodes joined"):
        cluster.wait_for_nodes(address, 3, timeout_s=0)


@pytest.mark.slow
def test_a_shell_without_the_token_is_told_how_to_pass_it(ray_cluster, tmp_path):
    address = ray_cluster()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {"HOME": str(tmp_path)}
    code = f"from verl_recipes import cluster; cluster.cluster_nodes({address!r})"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"the Ray cluster at {address} refused this shell (" in done.stderr, done.stderr[-2000:]
    assert "export RAY_AUTH_TOKEN=" in done.stderr
    assert not (tmp_path / ".ray").exists()  # asking wrote no token of its own


def test_an_address_without_a_cluster_says_what_cluster_must_be():
    with pytest.raises(RecipeError, match=r"cannot reach a Ray cluster at 127.0.0.1:\d+ .*http://<head>:8265"):
        cluster.cluster_nodes(f"127.0.0.1:{_free_port()}")


def _node(ip: str, gpus: int) -> dict:
    return {"id": ip.replace(".", ""), "ip": ip, "gpus": gpus}


EIGHT_BY_8 = [_node(f"10.0.0.{i}", 8) for i in range(1, 9)]


def _pools(*pools) -> list[Pool]:
    return [Pool(name, nodes, gpus, "keys") for name, nodes, gpus in pools]


@pytest.mark.parametrize("pools, nodes, error", [
    # qwen3-235b n4 on a two-node allocation
    ([("trainer", 4, 8)], EIGHT_BY_8[:2],
     "the recipe declares 4 nodes x 8 GPUs = 32 GPUs; the cluster at ADDR has 16 "
     "(10.0.0.1: 8 GPUs, 10.0.0.2: 8 GPUs)"),
    ([("trainer", 4, 8)], EIGHT_BY_8[:4], None),
    ([("trainer", 4, 8)], EIGHT_BY_8, None),
    # async 4+4 split on one node: both pools fit
    ([("trainer", 1, 4), ("standalone rollout", 1, 4)], EIGHT_BY_8[:1], None),
    ([("trainer", 2, 8), ("standalone rollout", 2, 8)], EIGHT_BY_8[:3],
     "the recipe declares trainer 2 nodes x 8 GPUs + standalone rollout 2 nodes x 8 GPUs = 32 GPUs; "
     "the cluster at ADDR has 24 (10.0.0.1: 8 GPUs, 10.0.0.2: 8 GPUs, 10.0.0.3: 8 GPUs)"),
    # enough GPUs, but no node holds a whole 8-GPU share
    ([("trainer", 2, 8)], [_node(f"10.0.1.{i}", 4) for i in range(4)],
     "the trainer pool needs 2 nodes with 8 GPUs each; the cluster at ADDR has 0 such node(s)"),
    ([("trainer", 1, 8)], [],
     "the recipe declares 1 node x 8 GPUs = 8 GPUs; the cluster at ADDR has 0 (no alive node)"),
])
def test_topology_errors_name_what_the_cluster_lacks(pools, nodes, error):
    errors = cluster_gpu_problems(_pools(*pools), nodes, "ADDR")
    if error is None:
        assert errors == []
    else:
        assert len(errors) == 1 and errors[0].startswith(error), errors


@pytest.mark.slow
@pytest.mark.parametrize("name, variant, pools", [
    (QWEN, None, [("trainer", 1, 8)]),
    (QWEN, "megatron", [("trainer", 1, 8)]),
    (QWEN, "async", [("trainer", 1, 4), ("standalone rollout", 1, 4)]),
    (QWEN, "separate_async", [("trainer", 1, 4), ("standalone rollout", 1, 4)]),
    ("qwen3-235b-a22b-grpo", "n4", [("trainer", 4, 8)]),
    ("qwen3-235b-a22b-grpo", "n32", [("trainer", 32, 8)]),
])
def test_gpu_pools_of_real_recipes(name, variant, pools):
    recipe = catalog.get(name, variant=variant)
    found = entrypoints.gpu_pools(compose(recipe), entrypoints.get(recipe.entrypoint))
    assert [(p.name, p.nnodes, p.gpus_per_node) for p in found] == pools


@pytest.mark.slow
def test_job_config_ships_repo_paths_relative_and_keeps_shared_ones(run_env):
    recipe = catalog.get(QWEN)
    cfg = compose(recipe, [f"actor_rollout_ref.rollout.multi_turn.tool_config_path={REPO / CODE_INTERPRETER}"])
    plan = plan_launch(recipe, [], dry=True)
    write_launch(plan)
    run_dir = plan.launch_dir
    shipped = cluster.job_config(cfg)
    # agents/ ships as verl_recipes/agents/, where its package name puts it
    assert shipped.actor_rollout_ref.rollout.multi_turn.tool_config_path == f"verl_recipes/{CODE_INTERPRETER}"
    assert shipped.data.train_files == cfg.data.train_files == str(run_env / "data/gsm8k_math/train.parquet")
    assert required_objects(shipped) == ["verl_recipes.rewards.math:compute_score",
                                         "verl_recipes.agents.code_interpreter:CodeInterpreterTool"]
    assert shared_paths(shipped, run_dir) == [str(run_dir), cfg.data.val_files, cfg.data.train_files]
    async_recipe = catalog.get(QWEN, variant="async")
    check, train = cluster.job_command(async_recipe, run_dir).split(" && ")
    assert check == "python -m verl_recipes.runtime.node_check"
    assert shlex.split(train) == ["python", "-m", async_recipe.entrypoint, "--config-path=$PWD",
                                  "--config-name=config", f"hydra.run.dir={run_dir}"]


def test_job_env_forwards_cluster_settings_but_not_secrets_or_head_paths(run_env, monkeypatch):
    for key, value in {"NCCL_SOCKET_IFNAME": "ib0", "HF_HOME": "/shared/hf", "HF_TOKEN": "hf_secret",
                       "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "ib0"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    env = cluster.job_env(run_env / "run")
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "ib0" and env["HF_HOME"] == "/shared/hf"
    assert "HF_TOKEN" not in env and "PYTHONPATH" not in env
    assert env["VERL_FILE_LOGGER_PATH"] == str(run_env / "run" / "metrics.jsonl")
    assert env["RAY_OVERRIDE_JOB_RUNTIME_ENV"] == "1"


def test_a_big_file_in_a_shipped_folder_is_refused(tmp_path, monkeypatch):
    for folder in ("verl_recipes", "rewards", "agents"):
        shutil.copytree(REPO / folder, tmp_path / f"repo/{folder}")
    monkeypatch.setattr(cluster, "REPO", tmp_path / "repo")
    weights = tmp_path / "repo/agents/model.safetensors"
    with open(weights, "wb") as f:
        f.truncate((cluster.MAX_SHIPPED_FILE_MB + 1) * 2**20)
    with pytest.raises(RecipeError, match=r"model.safetensors is 21 MiB: a cluster job copies"):
        cluster.pack_job(compose(catalog.get(QWEN)), tmp_path / "run", {})


def test_node_check_names_every_problem_it_finds(tmp_path):
    cfg = compose(catalog.get(QWEN))
    present = tmp_path / "train.parquet"
    present.touch()
    plan = node_plan(QWEN, cfg, tmp_path / "run", also_import=[
        "verl_recipes.rewards.math:no_such_function", "no_such_package.reward:f"])
    plan["paths"] = [str(present), str(tmp_path / "not_shared/test.parquet")]
    plan["verl"] = "0.0.1"
    problems = node_problems(plan)
    text = "\n".join(problems)
    missing_here = missing_packages(required_packages(cfg))  # this CPU machine lacks vllm (and maybe TransferQueue)
    assert "verl_recipes.rewards.math:no_such_function does not import (AttributeError" in text
    assert "no_such_package.reward:f does not import (ModuleNotFoundError" in text
    assert f"{tmp_path / 'not_shared/test.parquet'} is not visible here" in text
    assert "the recipes are proven against verl 0.0.1" in text
    assert "verl_recipes.rewards.math:compute_score " not in text and f"{present} " not in text
    assert all(missing in problems for missing in missing_here)
    assert len(problems) == 4 + len(missing_here)


@pytest.mark.slow
def test_flash_attention_is_required_unless_the_config_runs_without_it():
    """verl 0.9.1's FSDP models default to flash_attention_2 (workers/config/model.py); configs/attention replaces it."""
    from importlib.util import find_spec

    recipe = catalog.get("qwen25-7b-grpo")
    default = missing_packages(required_packages(compose(recipe)))
    without = missing_packages(required_packages(compose(recipe, ["+configs/attention=torch_varlen"])))
    needs_flash = any("'flash_attn'" in line and "+configs/attention=torch_varlen" in line for line in default)
    assert needs_flash == (find_spec("flash_attn") is None)
    assert not any("'flash_attn'" in line for line in without)

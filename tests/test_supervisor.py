"""The launcher's supervisor (verl_recipes/supervisor.py) on stand-in runs: a driver whose children carry the titles
of verl's and vLLM's processes (`exec -a`), killed or stopped as issue 45's faults are, and healthy runs that end."""

from __future__ import annotations

import os
import signal
import socket
import time

import psutil
import pytest

from verl_recipes import supervisor
from verl_recipes.catalog import REPO

pytestmark = pytest.mark.slow  # about 20 s of real processes

# a driver with a vLLM engine and an actor worker, which runs until told (or killed), then ends its children
DRIVER = """
bash -c 'exec -a VLLM::EngineCore sleep 300' & engine=$!
bash -c 'exec -a ray::WorkerDict.actor_update sleep 300' & worker=$!
echo "engine $engine worker $worker" > roles
if [ -n "${LEAVE:-}" ]; then bash -c 'trap "" TERM; exec sleep 300' & echo $! > leftover; fi
echo started
while [ ! -f stop ]; do sleep 0.1; done
kill $engine $worker
exit ${CODE:-0}
"""


@pytest.fixture
def fast(monkeypatch):
    for name, value in (("POLL_S", 0.2), ("GRACE_S", 1.0), ("STOPPED_S", 1.5), ("CLEANUP_S", 2.0)):
        monkeypatch.setattr(supervisor, name, value)


def start(tmp_path, *, code: int = 0, then=None, leave: bool = False):
    """Run the stand-in driver under the supervisor on a thread; `then(roles)` acts on it once its roles exist."""
    import threading

    result = {}

    def go():
        result["code"] = supervisor.run(["bash", "-c", DRIVER], tmp_path, {**os.environ, "CODE": str(code), "LEAVE": "1" if leave else ""},
                                        log=tmp_path / "verl.log")

    thread = threading.Thread(target=go)
    t0 = time.monotonic()
    thread.start()
    while not (tmp_path / "roles").exists() or len((tmp_path / "roles").read_text().split()) < 4:
        time.sleep(0.05)
    words = (tmp_path / "roles").read_text().split()
    roles = {words[0]: int(words[1]), words[2]: int(words[3])}
    time.sleep(2.0)  # ten polls: the supervisor knows a role only once a poll has seen it alive
    then(roles)
    thread.join(timeout=60)
    assert not thread.is_alive()
    return result["code"], time.monotonic() - t0, roles


def left(pids) -> list[int]:
    """The pids still running (a zombie has ended)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_a_killed_vllm_engine_ends_the_run_naming_it(tmp_path, fast, capfd):
    code, took, roles = start(tmp_path, then=lambda roles: os.kill(roles["engine"], signal.SIGKILL))
    out = capfd.readouterr().out
    assert code != 0 and took < 30, (code, took, out)  # bounds of 1-1.5 s, on a loaded machine
    assert f"[supervisor] the vLLM engine (pid {roles['engine']} on " in out and "resumes it from its last" in out
    assert not left(roles.values())
    assert "started" in (tmp_path / "verl.log").read_text()  # verl's output is kept as it went to the console


def test_a_stopped_actor_worker_ends_the_run(tmp_path, fast, capfd):
    code, took, roles = start(tmp_path, then=lambda roles: os.kill(roles["worker"], signal.SIGSTOP))
    out = capfd.readouterr().out
    assert code != 0 and took < 30, (code, took, out)  # bounds of 1-1.5 s, on a loaded machine
    assert f"the actor/ref worker (pid {roles['worker']} on {socket.gethostname()}) stopped; " in out
    assert not left(roles.values())


def test_a_run_that_ends_its_workers_as_it_ends_is_healthy(tmp_path, fast, capfd):
    code, _, roles = start(tmp_path, code=3, then=lambda roles: (tmp_path / "stop").touch())
    assert code == 3  # verl's own exit code, untouched
    assert "[supervisor]" not in capfd.readouterr().out


def test_what_verl_leaves_behind_is_killed(tmp_path, fast, capfd):
    code, _, roles = start(tmp_path, then=lambda roles: (tmp_path / "stop").touch(), leave=True)
    leftover = int((tmp_path / "leftover").read_text())
    assert code == 0
    assert f"[supervisor] killed 1 process(es) of the run left 2 s after verl exited: [{leftover}]" in capfd.readouterr().out
    assert not left([leftover, *roles.values()])


RAY_REPORT = """Traceback (most recent call last):
  File "verl/trainer/main_ppo.py", line 42, in main
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: RewardLoopWorker
\tactor_id: 5f1c0e8a9b7d6c5e4f3a2b1c01000000
\tpid: 4242
\tname: reward_loop_worker_0
\tnamespace: 7a1b
\tip: 10.0.3.7
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR
"""


def test_a_death_ray_reported_before_verl_exited_is_named(tmp_path, fast, capfd):
    """verl often ends by itself within a second of an actor's death (Ray's ActorDiedError): the supervisor names the
    actor from Ray's report in the log, with the next step."""
    (tmp_path / "report").write_text(RAY_REPORT)
    code = supervisor.run(["bash", "-c", "cat report; exit 1"], tmp_path, dict(os.environ), log=tmp_path / "verl.log")
    out = capfd.readouterr().out
    assert code == 1
    assert "[supervisor] the reward worker (pid 4242 on 10.0.3.7) died; the run cannot go on" in out
    # no report, or a clean exit: nothing to name
    assert supervisor.run(["bash", "-c", "echo oops; exit 2"], tmp_path, dict(os.environ), log=tmp_path / "b.log") == 2
    assert supervisor.run(["bash", "-c", "cat report"], tmp_path, dict(os.environ), log=tmp_path / "c.log") == 0
    assert "[supervisor]" not in capfd.readouterr().out
    assert supervisor.reported_death(RAY_REPORT.replace("RewardLoopWorker", "TaskRunner")).role == "Ray actor TaskRunner"


def test_verls_colocated_worker_is_named_from_rays_real_report():
    """Ray names verl's colocated worker by its qualified class name, `create_colocated_worker_cls.<locals>.WorkerDict`
    (its process title is `ray::WorkerDict`): the report of the kill on the H100 on 2026-12-08 names the role."""
    log = REPO / "results/faults/logs/faults.colocated.stuck_engine.trainer_worker.1.log"
    fault = supervisor.reported_death(log.read_text(errors="replace"))
    assert (fault.role, fault.pid, fault.what, fault.host) == ("actor/ref worker", 5231, "died", "192.0.2.2")


def test_a_node_ray_reports_by_an_address_of_this_machine_is_named_by_its_name():
    """A single node's worker: Ray gives its address, the line the machine's name, as for a process the supervisor
    watched itself; another node's address stays as Ray gave it."""
    own = next(addr.address for addrs in psutil.net_if_addrs().values() for addr in addrs
               if addr.family == socket.AF_INET)
    here = socket.gethostname()
    assert f"(pid 7 on {here}) died" in supervisor.Fault("reward worker", 7, "died", own).message()
    assert f"(pid 7 on {here}) died" in supervisor.Fault("reward worker", 7, "died").message()
    assert "(pid 7 on 203.0.113.9) died" in supervisor.Fault("reward worker", 7, "died", "203.0.113.9").message()


# a driver whose vLLM GPU worker is killed and which fails at once, as verl 0.9.1 did on the GPU
# (results/faults/vllm_worker.2026-11-28.json): vLLM's report of the death, then verl's traceback, well within the grace; the
# pauses give the supervisor's polls (0.2 s here) time to see the worker alive, then gone, on a busy machine
VLLM_DRIVER = """
bash -c 'exec -a VLLM::Worker sleep 300' & worker=$!
echo $worker > roles
sleep 2
kill -9 $worker
sleep 2
echo "(vLLMHttpServer pid=2538) (EngineCore pid=2640) ERROR 11-28 21:41:37 [multiproc_executor.py:284] Worker proc VllmWorker-0 died unexpectedly, shutting down executor."
echo "Error executing job with overrides: []"
echo "Traceback (most recent call last):"
echo "Exception: Call to collective_rpc method failed: cancelled"
exit 1
"""


def test_a_vllm_death_verl_failed_on_is_named(tmp_path, fast, monkeypatch, capfd):
    """verl fails within seconds of a vLLM worker's death, before GRACE_S: the supervisor names the worker from vLLM's
    report that precedes verl's traceback, with the pid it saw gone."""
    monkeypatch.setattr(supervisor, "GRACE_S", 30.0)
    code = supervisor.run(["bash", "-c", VLLM_DRIVER], tmp_path, dict(os.environ), log=tmp_path / "verl.log")
    worker = int((tmp_path / "roles").read_text())
    assert code == 1
    assert (f"[supervisor] the vLLM GPU worker (pid {worker} on {socket.gethostname()}) died; the run cannot go on"
            in capfd.readouterr().out)


def test_a_users_launch_names_a_vllm_death(run_env, fast, monkeypatch, capfd):
    """The path `make <recipe>` takes (launch.launch, a local run): verl's output reaches the launch folder's log,
    which is where the supervisor finds vLLM's report. On the GPU (results/faults/vllm_worker.2026-12-02.json) the
    launcher ran verl without a log, and the killed worker's run exited unnamed."""
    from verl_recipes import catalog, launch

    for name in ("check", "gpu_problems", "missing_packages"):  # a machine that passes the launcher's checks
        monkeypatch.setattr(launch, name, lambda *a, **k: [])
    monkeypatch.setattr(supervisor, "GRACE_S", 30.0)
    real = supervisor.run
    monkeypatch.setattr(supervisor, "run", lambda command, cwd, env, log: real(["bash", "-c", VLLM_DRIVER], cwd, env, log))
    code, launch_dir, _ = launch.launch(catalog.get("qwen25-7b-grpo"), [], mode="never")
    assert code == 1
    assert "[supervisor] the vLLM GPU worker (pid " in capfd.readouterr().out
    assert "Worker proc VllmWorker-0 died" in (launch_dir / launch.VERL_LOG).read_text()


def test_vllm_deaths_after_verls_own_error_are_its_shutdown():
    """A run that fails for another reason shuts vLLM down after its traceback: those reports name nothing."""
    error = "Error executing job with overrides: []\nTraceback (most recent call last):\ntorch.OutOfMemoryError: CUDA\n"
    engine = "(vLLMHttpServer pid=7) ERROR [core_client.py:600] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.\n"
    assert supervisor.vllm_death(error + engine, {"vLLM engine": 12}) is None
    assert supervisor.vllm_death(engine + error, {"vLLM engine": 12}) == supervisor.Fault("vLLM engine", 12, "died")
    # the first report names the cause: an engine that died takes its workers' reports with it
    worker = "(EngineCore pid=9) ERROR [multiproc_executor.py:284] Worker proc VllmWorker-1 died unexpectedly, shutting down executor.\n"
    assert supervisor.vllm_death(worker + engine + error, {}).role == "vLLM GPU worker"
    assert "(pid ? on" in supervisor.vllm_death(worker + error, {}).message()
    assert supervisor.vllm_death("all fine\n", {}) is None

"""Faults. The stale-weights fault (verl_recipes/runtime/faults.py), which the learning runs' stale control injects to
prove that the agreement gates catch a weight push that stops reaching the rollout: every push after the first hands
vLLM the first push's weights again, and nothing changes without the variable. Then the CPU parts of issue 45's fault
injection suite (tests/gpu/faults.py, run on the lent GPU machine): which process each fault hits, a save in
progress, the records' bounds and verdicts, and the layout over a machine's GPUs, on fake process tables and folders."""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import types
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from verl_recipes import gpu_queue, resume, supervisor
from verl_recipes.catalog import REPO
from verl_recipes.runtime import checkpoint_names, faults, forced_lengths, replay_poll, sglang_pixel_budget
from verl_recipes.runtime import checkpoints as ckpt
from verl_recipes.runtime.weight_push_socket import MODULE

# the suite's driver, by path (site-packages has a `tests` package of its own)
_spec = importlib.util.spec_from_file_location("gpu_faults", REPO / "tests" / "gpu" / "faults.py")
suite = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = suite  # its dataclasses look their module up
_spec.loader.exec_module(suite)


class Receiver:
    """verl's BucketedWeightReceiver.receive_weights as the fault sees it: buckets of (name, tensor) handed to a
    callback, the bucket's memory reused for the next one."""

    pushes: list[list[list[tuple[str, torch.Tensor]]]] = []

    def receive_weights(self, on_bucket_received):
        buckets = self.pushes.pop(0)
        for i, bucket in enumerate(buckets):
            on_bucket_received(bucket, i == len(buckets) - 1)
            for _, tensor in bucket:
                tensor.fill_(-1.0)  # the shared buffer, overwritten by the next bucket


def push(value: float) -> list[list[tuple[str, torch.Tensor]]]:
    return [[("a", torch.full((2,), value)), ("b", torch.full((3,), value))], [("c", torch.full((1,), value))]]


def test_every_push_after_the_first_loads_the_first_again():
    module = types.SimpleNamespace(BucketedWeightReceiver=type("R", (Receiver,), {}))
    faults.patch(module)
    faults.patch(module)  # once only
    module.BucketedWeightReceiver.pushes = [push(1.0), push(2.0), push(3.0)]
    loaded = []
    receiver = module.BucketedWeightReceiver()
    for _ in range(3):
        loaded.append({})
        receiver.receive_weights(lambda weights, is_last: loaded[-1].update({n: t.tolist() for n, t in weights}))
    assert loaded == [{"a": [1.0] * 2, "b": [1.0] * 3, "c": [1.0]}] * 3


def _hooks(env: dict) -> dict[str, list[str]]:
    """In a fresh interpreter that imports verl (which loads our plugins): each module a plugin waits for, and the
    plugins that wait for it."""
    code = textwrap.dedent('''
        import json, sys, verl
        print(json.dumps({f.name: sorted(t.__module__.rsplit(".", 1)[1] for t in f.thens)
                          for f in sys.meta_path if type(f).__name__ == "AfterImport"}))
    ''')
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two interpreters importing verl: 8 s
def test_verl_loads_the_fault_the_poll_the_names_and_the_lengths_only_when_asked():
    asks = (faults.FAULT_ENV, replay_poll.POLL_ENV, checkpoint_names.NAMES_ENV, forced_lengths.LENGTHS_ENV)
    env = {k: v for k, v in os.environ.items() if k not in asks}
    # the SGLang server's pixel budget needs no variable: only an SGLang run imports the module it waits for
    sglang = {sglang_pixel_budget.MODULE: ["sglang_pixel_budget"]}
    assert _hooks(env) == {MODULE: ["weight_push_socket"], **sglang}
    asked = {**env, faults.FAULT_ENV: faults.STALE_WEIGHTS, replay_poll.POLL_ENV: "0.2", checkpoint_names.NAMES_ENV: "1",
             forced_lengths.LENGTHS_ENV: "1"}
    assert _hooks(asked) == {MODULE: ["faults", "weight_push_socket"], replay_poll.MODULE: ["replay_poll"],
                             checkpoint_names.MODULE: ["checkpoint_names"],
                             **{server: ["forced_lengths"] for server in forced_lengths.SERVERS},
                             sglang_pixel_budget.MODULE: ["forced_lengths", "sglang_pixel_budget"]}


# ---------------------------------------------------------------- the fault injection suite (tests/gpu/faults.py)

P = suite.Proc
LAUNCHER = 100
SANDBOX_RUN = ("/usr/bin/python3", "-I", "-S", "-X", "utf8", "/repo/agents/sandbox_child.py", "setup", "{}")
# a colocated run as the launcher's descendants look: verl's driver leads its own session (supervisor.run), Ray's
# actors and vLLM's processes in it, a sandbox run in a session of its own, with the fork that keeps its title
RUN = [P(101, LAUNCHER, 101, ("python", "-m", "verl.trainer.main_ppo")),
       P(102, LAUNCHER, LAUNCHER, ("python", "-m", "verl_recipes.data.prepare", "gsm8k_math")),
       P(110, 101, 101, ("ray::TaskRunnerV1.run",)),
       P(111, 101, 101, ("ray::WorkerDict.actor_rollout_update_actor",)),
       P(112, 101, 101, ("ray::vLLMHttpServer.generate",)),
       P(113, 112, 101, ("VLLM::EngineCore",)),
       P(114, 113, 101, ("VLLM::Worker_TP0",)),
       P(115, 101, 101, ("ray::RewardLoopWorker.compute_score",)),
       P(116, 101, 101, ("ray::AgentLoopWorkerTQ.generate",)),
       P(120, 116, 120, SANDBOX_RUN),
       P(121, 120, 120, SANDBOX_RUN)]


@pytest.mark.parametrize("fault,pid", [("vllm_engine", 113), ("vllm_worker", 114), ("trainer_worker", 111),
                                       ("reward_worker", 115), ("sandbox", 120), ("stuck_engine", 113),
                                       ("driver_during_save", 110)])
def test_each_fault_hits_the_process_of_its_role(fault, pid):
    assert suite.target(RUN, suite.KINDS[fault].role).pid == pid
    assert suite.verl_session(RUN, LAUNCHER) == 101  # not the launcher's data preparation


def test_a_dead_or_missing_process_is_no_target():
    dead_engine = P(113, 112, 101, ("VLLM::EngineCore",), zombie=True)
    assert suite.target([p for p in RUN if p.pid != 113] + [dead_engine], "vLLM engine") is None
    assert suite.target(RUN[:2], "reward worker") is None
    assert suite.verl_session(RUN[1:], LAUNCHER) is None  # verl's driver not started yet


def test_the_faults_name_the_roles_the_supervisor_names():
    named = {role for _, role in supervisor.ROLES}
    assert {k.role for k in suite.KINDS.values() if k.named} <= named
    assert set(suite.KINDS) == {"vllm_engine", "vllm_worker", "trainer_worker", "reward_worker", "sandbox",
                                "stuck_engine", "driver_during_save"}  # issue 45's list


def test_a_real_titled_process_is_found_in_its_session():
    code = ("import subprocess, sys; p = subprocess.Popen(['bash', '-c', 'exec -a VLLM::EngineCore sleep 30'], "
            "start_new_session=True); print(p.pid, flush=True); p.wait()")
    launcher = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    engine = int(launcher.stdout.readline())
    try:
        found = suite.poll(lambda: suite.target(suite.snapshot(launcher.pid), "vLLM engine"), 5, 0.02)
        assert found and found.pid == engine and found.sid == engine
        assert suite.verl_session(suite.snapshot(launcher.pid), launcher.pid) == engine
    finally:
        os.kill(engine, signal.SIGKILL)
        launcher.wait()


def step_folder(root, step, complete=True):
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    if complete:
        ckpt.mark(folder)
    return folder


def test_a_save_in_progress_is_a_step_folder_without_its_marker_past_the_last(tmp_path):
    step_folder(tmp_path, 1)
    assert suite.saving(tmp_path, 1) is None and suite.newest_step(tmp_path) == 1
    writing = step_folder(tmp_path, 2, complete=False)
    assert suite.saving(tmp_path, 1) == writing
    assert suite.saving(tmp_path, 2) is None  # left from before the step the suite waits past
    ckpt.mark(writing)
    assert suite.saving(tmp_path, 1) is None and suite.newest_step(tmp_path) == 2
    assert suite.newest_step(tmp_path / "none") == 0


def test_the_relaunch_resumed_the_last_complete_checkpoint_and_passed_over_the_cut_one(tmp_path, monkeypatch):
    """On resume.decide's own note and the launch record's keys (verl_recipes/launch.py)."""
    monkeypatch.setenv("RL_RUNS_DIR", str(tmp_path))
    run_dir = tmp_path / "run"
    two = step_folder(run_dir / resume.CHECKPOINTS, 2)
    step_folder(run_dir / resume.CHECKPOINTS, 3, complete=False)
    cfg = OmegaConf.create({"trainer": {"max_actor_ckpt_to_keep": 2}})
    (run_dir / resume.STORED).write_text("trainer:\n  max_actor_ckpt_to_keep: 2\n")
    decision = resume.decide("run", cfg)
    launch_dir = run_dir / resume.LAUNCHES / "20261127-120000"
    launch_dir.mkdir(parents=True)
    (launch_dir / "launch.json").write_text(json.dumps({"decision": decision.note,
                                                        "resumed_from": str(decision.checkpoint)}))
    launch = suite.last_launch(run_dir)
    assert suite.resumed(launch, two, trained=True)
    assert not suite.resumed(launch, two, trained=False)
    assert not suite.resumed(launch, step_folder(tmp_path / "other", 1), trained=True)
    assert not suite.resumed({}, two, trained=True) and not suite.resumed(launch, None, trained=True)
    assert suite.passed_over(launch, "global_step_3")
    assert not suite.passed_over(launch, "global_step_30") and not suite.passed_over({}, "global_step_3")


def launch_folder(run_dir, name, steps=(), mtime=None):
    """A launch as verl_recipes/launch.py leaves it: its record, and verl's metrics of the steps it logged."""
    folder = run_dir / resume.LAUNCHES / name
    folder.mkdir(parents=True)
    (folder / "launch.json").write_text("{}")
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "data": {"x": s}}) + "\n" for s in steps))
    if mtime is not None:
        os.utime(folder / "launch.json", (mtime, mtime))
    return folder


def test_a_relaunchs_step_counts_once_logged_and_its_metrics_are_kept(tmp_path, monkeypatch):
    """verl logs a step after saving it: the suite waits for the launch's own metrics line, so a relaunch's first
    step is in its metrics when the next fault strikes, and copies each launch's metrics for resume_match.py."""
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    run_dir = tmp_path / "run"
    launch_folder(run_dir, "20261207-100000", steps=[1, 2], mtime=1000.0)  # the killed launch before
    assert suite.logged_step(run_dir, since=2000.0) == 0  # the relaunch has no launch record yet
    now = launch_folder(run_dir, "20261207-100500", steps=[], mtime=2001.0)
    assert suite.newest_launch(run_dir, since=2000.0) == now and suite.logged_step(run_dir, since=2000.0) == 0
    (now / "metrics.jsonl").write_text(json.dumps({"step": 3, "data": {}}) + "\n" + '{"step": 4, "da')
    assert suite.logged_step(run_dir, since=2000.0) == 3  # a line still being written is not a step
    dest = tmp_path / "out" / "metrics" / "faults.colocated.vllm_engine.1.jsonl"
    assert suite.keep_metrics(run_dir, 2000.0, dest) and dest.read_text().startswith('{"step": 3')
    assert not suite.keep_metrics(run_dir, 3000.0, tmp_path / "none.jsonl")  # that launch never wrote its record


def test_the_references_are_the_chains_launch_with_the_recipes_seed_and_the_next():
    setup = suite.Setup("qwen25-7b-grpo", REPO / "tiny", {}, REPO / "runs" / "r", "0", {})
    own = suite.rollout_seed(setup)
    assert own == 42  # verl 0.9.1's rollout.seed; the recipe keeps it
    command = setup.command([f"actor_rollout_ref.rollout.seed={own + 1}"])
    assert command[2:8] == ["verl_recipes", "run", "qwen25-7b-grpo", "--variant", "", "--resume"]
    assert command[-1].endswith("actor_rollout_ref.rollout.seed=43") and "trainer.save_freq=1" in command[-1]
    assert setup.command()[-1] == command[-1].removesuffix(" actor_rollout_ref.rollout.seed=43")
    with pytest.raises(SystemExit):
        suite.main(["reference", "qwen25-7b-grpo", "--steps", "2"])  # one step of noise is none


class Launcher:
    """A stand-in for `python -m verl_recipes run` under the suite: it leaves its launch record and logs `steps`
    steps at once, seeing the rollout seed it was given."""

    steps = 6
    seeds: list[str] = []

    def __init__(self, command, env, log):
        self.log, self.started = log, time.time()
        seed = [a for a in command[-1].split() if a.startswith("actor_rollout_ref.rollout.seed=")]
        Launcher.seeds.append(seed[0] if seed else "")
        log.write_text("launched\n")
        launch_folder(Path(env["RL_RUNS_DIR"]) / "qwen25-7b-grpo-v1", f"{len(Launcher.seeds)}",
                      steps=range(1, Launcher.steps + 1))
        self.proc = types.SimpleNamespace(returncode=0)

    def alive(self):
        return False

    def trim(self):
        pass


def fake_reference(tmp_path, monkeypatch, launcher):
    """The reference job's setup, its launches made by `launcher`."""
    setup = suite.Setup("qwen25-7b-grpo", tmp_path / "tiny", {}, tmp_path / "work" / "runs" / "qwen25-7b-grpo-v1",
                        "0", {"mode": "colocated", "recipe": "qwen25-7b-grpo", "hardware": "1 x H100", "date": "d"})
    monkeypatch.setattr(suite, "prepare", lambda spec, label, out, work: (out / "logs").mkdir(parents=True, exist_ok=True) or setup)
    monkeypatch.setattr(suite, "Run", launcher)
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    Launcher.seeds = []


def test_the_reference_job_runs_both_seeds_and_writes_what_resume_match_reads(tmp_path, monkeypatch):
    fake_reference(tmp_path, monkeypatch, Launcher)
    assert suite.reference("qwen25-7b-grpo", 6, tmp_path / "out", tmp_path / "work") == 0
    assert Launcher.seeds == ["", "actor_rollout_ref.rollout.seed=43"]  # the chain's own launch, then the next seed
    rec = json.loads((tmp_path / "out" / "reference.json").read_text())
    assert rec["seeds"] == {"own": 42, "other": 43} and rec["steps"] == 6 and rec["recipe"] == "qwen25-7b-grpo"
    for which in ("own", "other"):
        kept = tmp_path / "out" / "metrics" / rec["metrics"][which]
        assert sorted(json.loads(line)["step"] for line in kept.read_text().splitlines()) == [1, 2, 3, 4, 5, 6]
    monkeypatch.setenv("GPU_DEADLINE", str(time.time() + suite.START_S))  # no time for even one
    assert suite.reference("qwen25-7b-grpo", 6, tmp_path / "late", tmp_path / "work") == 0
    assert json.loads((tmp_path / "late" / "reference.json").read_text())["metrics"] == {}


def committed_reference(folder):
    """results/faults' reference record (2026-12-08: the seed-42 run only) and its runs' metrics, copied into
    `folder` as the suite's OUT holds them."""
    (folder / "metrics").mkdir(parents=True)
    shutil.copy(REPO / "results/faults/reference.json", folder)
    for metrics in (REPO / "results/faults/metrics").glob("*.reference.*.jsonl"):
        shutil.copy(metrics, folder / "metrics")


def test_a_later_session_makes_only_the_reference_run_the_record_lacks(tmp_path, monkeypatch):
    """2026-12-08's reference (results/faults) holds the seed-42 run only: copied into OUT, it is kept and the job
    makes the seed-43 run alone; a record of other steps, or a run cut short, is made again."""
    out = tmp_path / "out"
    committed_reference(out)
    fake_reference(tmp_path, monkeypatch, Launcher)
    assert suite.reference("qwen25-7b-grpo", 6, out, tmp_path / "work") == 0
    assert Launcher.seeds == ["actor_rollout_ref.rollout.seed=43"]
    rec = json.loads((out / "reference.json").read_text())
    assert rec["metrics"] == {"own": "faults.colocated.reference.s42.jsonl", "other": "faults.colocated.reference.s43.jsonl"}
    assert rec["runs"] == {"own": {"hardware": "1 x NVIDIA H100 80GB HBM3 (GPU 0 of 1)", "date": "2026-12-08"},
                           "other": {"hardware": "1 x H100", "date": "d"}}
    assert rec["logs"]["own"] == "faults.colocated.reference.s42.log"
    # the record now complete, a third session makes nothing; with other steps it makes both
    Launcher.seeds = []
    assert suite.reference("qwen25-7b-grpo", 6, out, tmp_path / "work") == 0
    assert Launcher.seeds == []
    assert suite.reference("qwen25-7b-grpo", 5, out, tmp_path / "work") == 0
    assert Launcher.seeds == ["", "actor_rollout_ref.rollout.seed=43"]


def test_a_reference_run_cut_short_is_made_again(tmp_path, monkeypatch):
    out = tmp_path / "out"
    committed_reference(out)
    kept = out / "metrics" / "faults.colocated.reference.s42.jsonl"
    kept.write_text("".join(line for line in kept.read_text().splitlines(keepends=True) if json.loads(line)["step"] < 6))
    fake_reference(tmp_path, monkeypatch, Launcher)
    assert suite.reference("qwen25-7b-grpo", 6, out, tmp_path / "work") == 0
    assert Launcher.seeds == ["", "actor_rollout_ref.rollout.seed=43"]


def test_a_faults_session_starts_the_chain_then_the_reference_seeded_from_the_committed_record(tmp_path):
    """tests/gpu/faults_session.sh start, with the kit, pip and the suite stubbed: the extra wheels installed, OUT
    seeded with results/faults' reference record and runs, the chain then the reference queued on GPU 0 within the
    seconds given, and OUT brought back whole as faults_out.tgz."""
    checkout, stubs, kit = tmp_path / "checkout", tmp_path / "stubs", tmp_path / "gpu"
    for name in ("faults_session.sh", "side_by_side.sh", "wait.sh", "harvest.sh"):
        (checkout / "tests/gpu").mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "tests/gpu" / name, checkout / "tests/gpu")
    committed_reference(checkout / "results/faults")
    (checkout / ".whl/extra").mkdir(parents=True)
    (checkout / ".whl/extra/liger_kernel-0.8.2-py3-none-any.whl").write_bytes(b"")
    log = tmp_path / "calls.log"
    for path, body in ((stubs / "python3", 'echo "python3 $*" >> "$LOG"'), (kit / "bin/install.sh", "exit 0"),
                       (kit / "bin/run.sh", 'echo "run.sh $*" >> "$LOG"')):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/usr/bin/env bash\n{body}\n")
        path.chmod(0o755)
    (tmp_path / "device").mkdir()
    root = tmp_path / "faults"
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "LOG": str(log), "GPU_KIT": str(kit), "FAULTS_ROOT": str(root),
           "REPO_COPY": str(tmp_path / "repo"), "EXTRA_SITE": str(tmp_path / "extra"), "OUT": str(tmp_path / "device"),
           "STAGGER_S": "0", "POLL_S": "1"}
    done = subprocess.run(["bash", "tests/gpu/faults_session.sh", "start", "600", "trainer_worker,vllm_engine", "30"],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("python3 -m pip install") and calls[0].endswith("liger_kernel-0.8.2-py3-none-any.whl")
    assert f"--target {tmp_path / 'extra'}" in calls[0]
    runs = [c.split(" -- ", 1) for c in calls[1:]]
    assert [head.split()[1:3] for head, _ in runs] == [["faults.colocated", "all"], ["faults.reference", "all"]]
    assert all(int(head.split()[3]) <= 600 for head, _ in runs)
    assert [cmd for _, cmd in runs] == [
        f"python3 tests/gpu/faults.py job qwen25-7b-grpo trainer_worker,vllm_engine --out {root / 'out'}",
        f"python3 tests/gpu/faults.py reference qwen25-7b-grpo --out {root / 'out'}"]
    with tarfile.open(tmp_path / "device/faults_out.tgz") as brought:
        names = set(brought.getnames())
    assert {"out/reference.json", "out/metrics/faults.colocated.reference.s42.jsonl", "out/side.log"} <= names
    usage = subprocess.run(["bash", "tests/gpu/faults_session.sh"], cwd=checkout, env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr


class SlowLauncher(Launcher):
    """A launch still running that took SLOW_S to log its steps (its start stamped that long ago)."""

    def __init__(self, command, env, log):
        super().__init__(command, env, log)
        self.started -= SLOW_S

    def alive(self):
        return True

    def end(self, wait_s=None):
        pass


SLOW_S = 2 * suite.START_S


def test_the_references_second_run_is_planned_with_the_first_runs_own_time(tmp_path, monkeypatch):
    fake_reference(tmp_path, monkeypatch, SlowLauncher)
    # room for a run as START_S guesses it, not for one as slow as the first turned out
    monkeypatch.setenv("GPU_DEADLINE", str(time.time() + suite.START_S + 5 * suite.STEP_S + 60))
    assert suite.reference("qwen25-7b-grpo", 6, tmp_path / "out", tmp_path / "work") == 0
    assert Launcher.seeds == [""]
    assert list(json.loads((tmp_path / "out" / "reference.json").read_text())["metrics"]) == ["own"]


def record(fault, **changes):
    kind = suite.KINDS[fault]
    message = supervisor.Fault(kind.role, 113, kind.what).message()
    rec = {"fault": fault, "mode": "colocated", "rc": 1, "detect_s": 25.0, "message": message,
           "expected_message": message, "resumed": True, "gpu_processes_left": []}
    if not kind.ends:
        rec.update(rc=None, detect_s=None, message=None, resumed=None, trained_after=True)
    if fault == "driver_during_save":
        rec.update(message=None, cut="global_step_3", cut_short=True, passed_over=True)
    return {**rec, **changes}


@pytest.mark.parametrize("fault", list(suite.KINDS))
def test_a_fault_ended_in_bound_named_and_resumed_passes(fault):
    assert suite.failures(suite.KINDS[fault], record(fault)) == []


@pytest.mark.parametrize("changes,why", [
    ({"rc": None, "detect_s": None}, "did not end within 90 s"),
    ({"rc": 0}, "exited 0"),
    ({"detect_s": 61.0}, "61 s after the fault, over its 60 s bound"),
    ({"message": None}, "the supervisor's line is None"),  # verl ended by itself, no line names the worker
    ({"resumed": None}, "not relaunched"),
    ({"resumed": False}, "did not resume"),
    ({"gpu_processes_left": [{"pid": 7, "name": "python", "used_mib": "500"}]}, "1 GPU process(es) left 30 s"),
])
def test_a_worker_fault_fails_on_each_broken_promise(changes, why):
    found = suite.failures(suite.KINDS["vllm_engine"], record("vllm_engine", **changes))
    assert len(found) == 1 and why in found[0], found


def test_a_stopped_engine_has_the_heartbeat_bound_and_the_others_theirs():
    assert suite.KINDS["stuck_engine"].bound_s == 2 * supervisor.POLL_S + supervisor.STOPPED_S + supervisor.CLEANUP_S
    assert suite.KINDS["stuck_engine"].what == "stopped" and suite.KINDS["vllm_engine"].what == "died"
    assert suite.KINDS["reward_worker"].bound_s == 60.0 == suite.KINDS["driver_during_save"].bound_s
    assert not suite.failures(suite.KINDS["stuck_engine"], record("stuck_engine", detect_s=43.0))
    assert suite.failures(suite.KINDS["stuck_engine"], record("stuck_engine", detect_s=45.0))


def test_a_killed_sandbox_call_must_leave_the_run_training():
    kind = suite.KINDS["sandbox"]
    assert "ended (exit 1)" in suite.failures(kind, record("sandbox", rc=1))[0]
    assert "no step was checkpointed" in suite.failures(kind, record("sandbox", trained_after=False))[0]
    assert "the supervisor ended the run" in suite.failures(kind, record("sandbox", message="[supervisor] x"))[0]


def test_a_save_that_finished_or_a_cut_one_resumed_fails():
    kind = suite.KINDS["driver_during_save"]
    assert "no save was cut short" in suite.failures(kind, record("driver_during_save", cut_short=False))[0]
    assert "did not name global_step_3" in suite.failures(kind, record("driver_during_save", passed_over=False))[0]


def test_records_are_written_as_issue_45_names_them(tmp_path):
    suite.write(record("vllm_engine", mode="separate_async"), tmp_path)
    rec = json.loads((tmp_path / "vllm_engine-separate_async.json").read_text())
    assert rec["passed"] is True and rec["failures"] == []
    assert suite.resume_match.record_name("sandbox", "colocated") == "sandbox.json"


def test_nvidia_smi_lines_and_the_hardware():
    text = "4242, /usr/bin/python3, 1500\n4243, ray::WorkerDict, 900\n"
    assert suite.parse_compute_apps(text) == [{"pid": 4242, "name": "/usr/bin/python3", "used_mib": "1500"},
                                              {"pid": 4243, "name": "ray::WorkerDict", "used_mib": "900"}]
    assert suite.parse_compute_apps("") == [] and suite.parse_compute_apps("No running processes found") == []
    assert suite.hardware(["NVIDIA H100 80GB HBM3"] * 4, "2,3") == "2 x NVIDIA H100 80GB HBM3 (GPU 2,3 of 4)"


def test_the_launch_is_the_cards_tiny_smoke_made_resumable():
    args = suite.launch_args("qwen25-7b-grpo:separate_async", REPO / "tiny" / "model")
    assert args[0] == "+configs/smoke=tiny_gpu_separate_async" and "trainer.save_freq=1" in args
    assert not [a for a in args if "hf_model" in a or "${trainer.total_training_steps}" in a]


def laid_out(modes: list[str], chain: int, gpus: int = 4, references: bool = True) -> list:
    jobs = suite.queue_jobs(suite.plan(modes, list(suite.KINDS), chain, references), "o")
    return gpu_queue.lay_out(jobs, gpus, 15)


def test_colocated_faults_lay_out_one_a_gpu_and_the_sandbox_after_the_references():
    jobs = [placed.line() for placed in laid_out(["colocated"], 2)]
    assert [job.split()[0] for job in jobs] == ["0", "1", "2", "3", "+3"]
    assert [job.split()[4:7] for job in jobs] == [["job", "qwen25-7b-grpo", "vllm_engine,vllm_worker"],
                                                  ["job", "qwen25-7b-grpo", "trainer_worker,reward_worker"],
                                                  ["job", "qwen25-7b-grpo", "stuck_engine,driver_during_save"],
                                                  ["reference", "qwen25-7b-grpo", "--out"],
                                                  ["job", "retool-qwen25-7b", "sandbox"]]
    assert 1250 < gpu_queue.finish_s(laid_out(["colocated"], 2)) < 1450  # results/faults/README.md: ~1345 s
    without = laid_out(["colocated"], 2, references=False)
    assert [placed.line().split()[0] for placed in without] == ["0", "1", "2", "3"]  # none queued
    assert 1100 < gpu_queue.finish_s(without) < 1300  # ~1185 s


def test_the_references_are_two_launches_of_their_steps_and_fit_after_any_chain():
    assert suite.job_seconds([suite.REFERENCE]) == suite.BUILD_S + 2 * (
        suite.START_S + (suite.REFERENCE_STEPS - 1) * suite.STEP_S)
    # a chain of three relaunches resumes at most step 4 or so; the noise needs steps 2..K, two or more
    assert suite.REFERENCE_STEPS >= 5 and suite.FIRST_NOISE_STEPS == 3
    assert suite.plan(["separate_async"], ["vllm_engine"], 1)[-1] == ("qwen25-7b-grpo:separate_async", ["reference"])
    assert suite.plan(["colocated"], ["sandbox"], 1) == [("retool-qwen25-7b", ["sandbox"])]  # nothing to resume


def test_separate_async_takes_two_gpus_a_job_and_queues_what_does_not_fit():
    laid = laid_out(["separate_async"], 3)
    assert [placed.line().split()[0] for placed in laid] == ["0,1", "2,3", "+2,3"]  # the references queue
    assert "sandbox" not in str(laid)  # the variant has no tool
    both = [placed.line() for placed in laid_out(list(suite.MODES), 2, references=False)]
    assert len(both) == 7 and sum(job.startswith("+") for job in both) == 5  # two jobs of two GPUs start
    with pytest.raises(ValueError, match="needs 2 GPUs"):
        gpu_queue.lay_out(suite.queue_jobs(suite.plan(["separate_async"], ["vllm_engine"], 1), "o"), 1, 15)


def test_the_plan_is_refused_when_its_seconds_do_not_fit(capsys):
    with pytest.raises(SystemExit):
        suite.main(["1300", "--modes", "colocated"])
    assert "takes about 1345 s" in capsys.readouterr().err
    assert suite.main(["1400", "--modes", "colocated", "--dry-run"]) == 0
    assert "5 jobs on 4 GPUs" in capsys.readouterr().out
    assert suite.main(["1300", "--modes", "colocated", "--no-reference", "--dry-run"]) == 0
    assert "4 jobs on 4 GPUs" in capsys.readouterr().out


def test_a_chain_short_of_time_still_relaunches_to_show_its_last_fault_resumed():
    take = suite.START_S + suite.KINDS["stuck_engine"].bound_s + suite.SETTLE_S
    assert suite.next_launch("stuck_engine", False, take + 1) == ("stuck_engine", True, "")
    # 2026-12-07: 314 s left, the next fault needs more; the killed worker's relaunch (START_S) still runs
    fault, go, note = suite.next_launch("stuck_engine", True, suite.START_S + 4)
    assert (fault, go) == (None, True) and "stopping before stuck_engine" in note
    assert suite.next_launch("stuck_engine", False, suite.START_S + 4)[:2] == (None, False)  # nothing waits on a relaunch
    assert suite.next_launch(None, True, suite.START_S - 1)[:2] == (None, False)
    assert "before the last relaunch" in suite.next_launch(None, True, suite.START_S - 1)[2]
    assert suite.next_launch(None, False, 10_000) == (None, False, "")  # the chain is done


def test_a_chain_plans_its_relaunches_with_its_own_measured_start_up():
    assert suite.start_s(None) == suite.START_S  # nothing measured yet: the prior
    h200 = 211.0  # an H200's launch to its first step (2026-11-28)
    assert suite.start_s(h200) == pytest.approx(h200 * suite.START_MARGIN)
    left = suite.start_s(h200) + suite.KINDS["stuck_engine"].bound_s + suite.SETTLE_S + 1
    assert suite.next_launch("stuck_engine", False, left)[:2] == (None, False)  # START_S refuses the fault
    assert suite.next_launch("stuck_engine", False, left, suite.start_s(h200)) == ("stuck_engine", True, "")
    slow = suite.START_S * 1.5  # a slower machine than the prior: its own start-up refuses what START_S would take
    fault, go, note = suite.next_launch(None, True, suite.START_S + 1, suite.start_s(slow))
    assert (fault, go) == (None, False) and f"{suite.start_s(slow):.0f} s needed" in note

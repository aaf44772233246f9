"""Issue 45's fault injection suite, on one lent machine: tiny real recipe runs, one a GPU (two for separate_async),
each killed or stopped as a worker of a user's run dies or hangs, measured, then relaunched with RESUME=auto.

    python3 tests/gpu/faults.py SECONDS [--gpus 4] [--modes colocated separate_async] [--faults ...] [--chain 2]
                                        [--no-reference] [--out /tmp/faults/out] [--dry-run]
lays the faults out over the GPUs and runs them through tests/gpu/side_by_side.sh (the kit's run.sh, one runs folder
a job), like learn_reruns.py; --dry-run prints the jobs and the expected seconds. Each job is
    python3 tests/gpu/faults.py job RECIPE[:VARIANT] FAULT[,FAULT...] [--out DIR] [--work DIR]
which builds the recipe's tiny model (python -m verl_recipes.smoke.tiny) and runs a chain: launch
`python -m verl_recipes run` with the card's tiny smoke overlay, a complete checkpoint every step and never-reached
step counts; once a step is checkpointed and the target process exists (found by verl_recipes/supervisor.py's role
titles), kill -9 or SIGSTOP it; time the run's exit; list the GPU processes left SETTLE_S later; relaunch. The relaunch
must resume the newest complete checkpoint and train a step (`resumed`), then takes the next fault of the chain, and
the last relaunch is ended by the suite. A chain costs one start-up a fault instead of two.

- sandbox: retool-qwen25-7b, whose tiny model calls its tool in every trajectory. agents/sandbox.py runs each call in
  a process of its own, so killing one costs that call only: the run must train on, with no supervisor line.
- driver_during_save: kill -9 of verl's TaskRunner (the trainer loop, which writes a checkpoint and marks it
  COMPLETE) while a global_step_N folder exists without its marker (verl_recipes/runtime/checkpoints.py); the relaunch
  must pass that folder over and resume the one before it.
Each fault writes OUT/<fault>[-separate_async].json (results/faults/README.md), OUT/logs/<job>.<n>.log and the
launch's metrics, OUT/metrics/<job>.<n>.jsonl. A relaunch's record names its metrics (`relaunch_metrics`): its first
step is the resumed one. Each mode also gets (--no-reference: not)
    python3 tests/gpu/faults.py reference RECIPE[:VARIANT] [--steps 6] [--out DIR] [--work DIR]
the chain's launch left uninterrupted to --steps steps, once with the recipe's rollout seed and once with the next:
OUT/reference[-separate_async].json. tests/gpu/resume_match.py then compares each relaunch's first step with the
first run's same step, within the noise the two measure (issue 45's exact resume).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.append(str(REPO))  # verl_recipes from this checkout where none is installed (the lent machine)
sys.path.append(str(HERE))  # resume_match beside it, also when this file is loaded by path (tests/test_faults.py)

import resume_match  # noqa: E402

from verl_recipes import gpu_queue, supervisor  # noqa: E402
from verl_recipes.runtime import checkpoints as ckpt  # noqa: E402

MODES = {"colocated": "qwen25-7b-grpo", "separate_async": "qwen25-7b-grpo:separate_async"}
WIDTH = {"colocated": 1, "separate_async": 2}  # GPUs a run takes (its card's tiny overlay)
SANDBOX_RECIPE = "retool-qwen25-7b"  # the one recipe whose tiny run calls a sandboxed tool
SANDBOX_SCRIPT = "sandbox_child.py"  # agents/sandbox.py starts `python ... sandbox_child.py setup` per tool call
DRIVER_TITLE = "ray::TaskRunner"  # verl 0.9.1's TaskRunnerV1: the trainer loop, which saves and marks checkpoints
DRIVER = "trainer driver"
SANDBOX = "sandbox"
REFERENCE = resume_match.REFERENCE  # the job that runs a mode's launch uninterrupted, twice, and its record

DIED_BOUND_S = 60.0  # issue 45: a run whose process died exits within 60 s
# issue 45: "heartbeat + 30 s" after a process stops. The supervisor's heartbeat is its poll: it sees the stop within
# one, acts within another once STOPPED_S have passed, and the run has exited after its cleanup wait
STOPPED_BOUND_S = 2 * supervisor.POLL_S + supervisor.STOPPED_S + supervisor.CLEANUP_S
SURVIVE_BOUND_S = 120.0  # a killed sandbox call: the run must checkpoint a further step within this
HANG_S = 30.0  # how long past its bound a run is still timed before the suite ends it
SETTLE_S = 30.0  # issue 45: no GPU process of the run is left 30 s after it exits
STEP_S = 10.0  # a tiny step with its save, once started (3-4 s on an H200, results/smoke)
REFERENCE_STEPS = 6  # a reference run's steps: past the step any chain's relaunch resumes, and 5 steps of noise
FIRST_NOISE_STEPS = resume_match.FIRST_RESUMABLE + 1  # the fewest steps that give the noise two steps
START_S = 310.0  # a launch to its first checkpoint (eager vLLM, no validation): 211 s on an H200 (2026-11-28), 306 and 275 s on an H100 (2026-12-07)
# once a job's first launch has trained, its own start-up with this margin replaces START_S: a relaunch is the same
# launch on the same machine (an H200's 211 s let a one-GPU session take a fault that START_S, an H100's, refused)
START_MARGIN = 1.15
START_TIMEOUT_S = 600.0  # a start-up beside three neighbours took 4.5 min (results/learn/README.md)
INJECT_TIMEOUT_S = 180.0  # a save or a tool call comes every step
BUILD_S = 60.0  # the tiny model and data (ReTool's teaching on the GPU included)
POLL_S = 0.2
FIND_POLL_S = 0.05  # a sandbox run lives a fraction of a second
SAVE_POLL_S = 0.02  # a tiny model's save lasts a fraction of a second
LOG_TAIL = 4 << 20  # bytes of a launch's log kept: what comes back from the machine is limited
# a resumable run: verl's full checkpoint every step (not the smoke's last-step HF save), two complete ones kept,
# step counts no chain reaches (the suite ends the last run), no validation and eager vLLM for a short start-up
RUN_ARGS = ["trainer.save_freq=1", "trainer.max_actor_ckpt_to_keep=2", "trainer.total_training_steps=1000",
            "trainer.total_epochs=1000", "trainer.val_before_train=false", "trainer.test_freq=-1",
            "actor_rollout_ref.rollout.enforce_eager=true"]


@dataclass(frozen=True)
class Kind:
    role: str  # a role name of supervisor.ROLES, or SANDBOX / DRIVER
    sig: signal.Signals
    ends: bool = True  # the run must end; False: it must train on
    named: bool = True  # the supervisor's line must name the target

    @property
    def bound_s(self) -> float:
        if not self.ends:
            return SURVIVE_BOUND_S
        return STOPPED_BOUND_S if self.sig == signal.SIGSTOP else DIED_BOUND_S

    @property
    def what(self) -> str:
        return "stopped" if self.sig == signal.SIGSTOP else "died"


KINDS = {
    "vllm_engine": Kind("vLLM engine", signal.SIGKILL),
    "vllm_worker": Kind("vLLM GPU worker", signal.SIGKILL),
    "trainer_worker": Kind("actor/ref worker", signal.SIGKILL),
    "reward_worker": Kind("reward worker", signal.SIGKILL),
    "sandbox": Kind(SANDBOX, signal.SIGKILL, ends=False, named=False),
    "stuck_engine": Kind("vLLM engine", signal.SIGSTOP),
    # the TaskRunner's death ends verl by itself (Ray fails its driver's wait), so no supervisor line is due
    "driver_during_save": Kind(DRIVER, signal.SIGKILL, named=False),
}


# ---------------------------------------------------------------- processes


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    sid: int
    cmd: tuple[str, ...]
    zombie: bool = False

    def cmdline(self) -> list[str]:  # what supervisor.role_of reads
        return list(self.cmd)


def snapshot(launcher: int) -> list[Proc]:
    """The launcher's descendants: verl's session, and the sandbox runs that leave it (start_new_session)."""
    try:
        procs = psutil.Process(launcher).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    table = []
    for proc in procs:
        try:
            table.append(Proc(proc.pid, proc.ppid(), os.getsid(proc.pid), tuple(proc.cmdline()),
                              proc.status() == psutil.STATUS_ZOMBIE))
        except (psutil.Error, OSError):
            pass
    return table


def verl_session(table: list[Proc], launcher: int) -> int | None:
    """The session the supervisor watches: verl's driver leads it, a child of the launcher (supervisor.run)."""
    return next((p.pid for p in table if p.ppid == launcher and p.sid == p.pid), None)


def role(proc: Proc) -> str | None:
    if any(Path(part).name == SANDBOX_SCRIPT for part in proc.cmd):
        return SANDBOX
    if " ".join(proc.cmd).startswith(DRIVER_TITLE):
        return DRIVER
    return supervisor.role_of(proc)


def target(table: list[Proc], wanted: str) -> Proc | None:
    """The live process of that role nearest the top of its tree (a sandbox run's forks keep its title), lowest pid."""
    matches = [p for p in table if not p.zombie and role(p) == wanted]
    pids = {p.pid for p in matches}
    return min((p for p in matches if p.ppid not in pids), key=lambda p: p.pid, default=None)


def parse_compute_apps(text: str) -> list[dict]:
    """nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits"""
    apps = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and fields[0].isdigit():
            apps.append({"pid": int(fields[0]), "name": fields[1], "used_mib": fields[2]})
    return apps


def compute_apps(gpus: str) -> list[dict]:
    select = ["-i", gpus] if gpus else []
    done = subprocess.run(["nvidia-smi", *select, "--query-compute-apps=pid,process_name,used_memory",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=60)
    return parse_compute_apps(done.stdout)


def hardware(names: list[str], gpus: str) -> str:
    used = [names[int(g)] for g in gpus.split(",")] if gpus else names
    return f"{len(used)} x {used[0]} (GPU {gpus or 'all'} of {len(names)})" if used else "no GPU"


# ---------------------------------------------------------------- checkpoints and verdicts


def newest_step(checkpoints: Path) -> int:
    newest = ckpt.newest_complete(checkpoints)[0]
    return ckpt.step(newest) if newest else 0


def saving(checkpoints: Path, after: int) -> Path | None:
    """A save in progress: a step folder past `after`, newer than every complete one, without its marker yet."""
    incomplete = ckpt.newest_complete(checkpoints)[1]
    return incomplete[-1] if incomplete and ckpt.step(incomplete[-1]) > after else None


def newest_launch(run_dir: Path, since: float = 0.0) -> Path | None:
    """The folder of the newest launch (verl_recipes/launch.py) whose record was written at `since` or later."""
    from verl_recipes.launch import LAUNCH_RECORD
    from verl_recipes.resume import LAUNCHES

    records = sorted((run_dir / LAUNCHES).glob(f"*/{LAUNCH_RECORD}"), key=lambda p: p.stat().st_mtime)
    return records[-1].parent if records and records[-1].stat().st_mtime >= since else None


def last_launch(run_dir: Path) -> dict:
    """The newest launch record: its resumption decision and the checkpoint it resumed."""
    from verl_recipes.launch import LAUNCH_RECORD

    folder = newest_launch(run_dir)
    return json.loads((folder / LAUNCH_RECORD).read_text()) if folder else {}


def logged_step(run_dir: Path, since: float) -> int:
    """The newest step the launch started at `since` has logged, 0 before any: verl logs a step after saving it, so
    a relaunch's first step is both checkpointed and in its metrics once this passes it."""
    from verl_recipes.launch import metrics_file

    folder = newest_launch(run_dir, since)
    return max(resume_match.read_steps(metrics_file(folder)), default=0) if folder else 0


def keep_metrics(run_dir: Path, since: float, dest: Path) -> bool:
    """Copy the metrics of the launch started at `since` to `dest` (tests/gpu/resume_match.py reads them)."""
    from verl_recipes.launch import metrics_file

    folder = newest_launch(run_dir, since)
    if not folder or not metrics_file(folder).is_file():
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(metrics_file(folder).read_bytes())
    return True


def resumed(launch: dict, checkpoint: Path | None, trained: bool) -> bool:
    """Issue 45: the relaunch resumed the last complete checkpoint and trained a step."""
    return checkpoint is not None and Path(launch.get("resumed_from") or "/").name == checkpoint.name and trained


def passed_over(launch: dict, folder: str) -> bool:
    """The launcher named the cut-short folder among the incomplete ones it did not resume (resume.decide's note)."""
    _, said, named = launch.get("decision", "").partition("passed over")
    return bool(said) and folder in named.replace(",", " ").split()


def supervisor_line(text: str) -> str | None:
    return next((line for line in text.splitlines() if line.startswith("[supervisor] the ")), None)


def failures(kind: Kind, rec: dict) -> list[str]:
    """Why a record does not pass: none means it passed."""
    out = []
    if kind.ends:
        if rec["rc"] is None:
            out.append(f"the run did not end within {kind.bound_s + HANG_S:.0f} s of the fault")
        elif rec["rc"] == 0:
            out.append("the run exited 0")
        elif rec["detect_s"] > kind.bound_s:
            out.append(f"the run ended {rec['detect_s']:.0f} s after the fault, over its {kind.bound_s:.0f} s bound")
        if kind.named and rec["message"] != rec["expected_message"]:
            out.append(f"the supervisor's line is {rec['message']!r}, not {rec['expected_message']!r}")
        if rec["resumed"] is not True:
            out.append("not relaunched" if rec["resumed"] is None else
                       f"the relaunch did not resume {rec.get('checkpoint')} and train a step")
    else:
        if rec["rc"] is not None:
            out.append(f"the run ended (exit {rec['rc']}) after the fault")
        if rec["message"]:
            out.append(f"the supervisor ended the run: {rec['message']}")
        if not rec["trained_after"]:
            out.append(f"no step was checkpointed within {kind.bound_s:.0f} s of the fault")
    if rec.get("cut_short") is False:
        out.append(f"{rec['cut']} was complete by the time the run ended: no save was cut short")
    if rec.get("passed_over") is False:
        out.append(f"the relaunch did not name {rec['cut']} as passed over")
    if rec["gpu_processes_left"]:
        out.append(f"{len(rec['gpu_processes_left'])} GPU process(es) left {SETTLE_S:.0f} s after the run ended")
    return out


def write(rec: dict, out: Path) -> None:
    failed = failures(KINDS[rec["fault"]], rec)
    rec.update(passed=not failed, failures=failed)
    (out / resume_match.record_name(rec["fault"], rec["mode"])).write_text(json.dumps(rec, indent=1) + "\n")
    if rec["resumed"] is not None or not KINDS[rec["fault"]].ends:  # else its relaunch writes it again
        print(f"[faults] {rec['fault']} ({rec['mode']}): {'PASS' if not failed else 'FAIL: ' + '; '.join(failed)}",
              flush=True)


# ---------------------------------------------------------------- the plan


def mode_of(spec: str) -> str:
    return "separate_async" if spec.endswith(":separate_async") else "colocated"


def job_name(spec: str, faults: list[str]) -> str:
    return ".".join(["faults", mode_of(spec), *faults])


def job_seconds(faults: list[str]) -> float:
    """A job's guess. A chain: the build, one launch a fault (and the one that shows the last resumed), each fault's
    bound and settling time. The references: the build and two launches of REFERENCE_STEPS steps."""
    if faults == [REFERENCE]:
        return BUILD_S + 2 * (START_S + (REFERENCE_STEPS - 1) * STEP_S)
    launches = len(faults) + (1 if KINDS[faults[-1]].ends else 0)
    return BUILD_S + launches * START_S + sum(KINDS[f].bound_s + SETTLE_S for f in faults)


def plan(modes: list[str], faults: list[str], chain: int, references: bool = True) -> list[tuple[str, list[str]]]:
    """(recipe, its chain of faults): each mode's faults in chains of `chain`, and its reference runs, [REFERENCE],
    for tests/gpu/resume_match.py; the sandbox on ReTool, colocated."""
    jobs = []
    for mode in modes:
        chained = [f for f in faults if f != "sandbox"]
        jobs += [(MODES[mode], chained[i:i + chain]) for i in range(0, len(chained), chain)]
        if references and chained:
            jobs.append((MODES[mode], [REFERENCE]))
        if mode == "colocated" and "sandbox" in faults:
            jobs.append((SANDBOX_RECIPE, ["sandbox"]))
    return jobs


def job_command(spec: str, faults: list[str], out: str) -> str:
    if faults == [REFERENCE]:
        return f"python3 {HERE / 'faults.py'} {REFERENCE} {spec} --out {out}"
    return f"python3 {HERE / 'faults.py'} job {spec} {','.join(faults)} --out {out}"


def queue_jobs(jobs: list[tuple[str, list[str]]], out: str) -> list[gpu_queue.Job]:
    """The plan's jobs as verl_recipes/gpu_queue.py lays them out: two-GPU jobs first, then the longest."""
    return [gpu_queue.Job(job_name(spec, faults), job_command(spec, faults, out), job_seconds(faults),
                          WIDTH[mode_of(spec)])
            for spec, faults in sorted(jobs, key=lambda j: (-WIDTH[mode_of(j[0])], -job_seconds(j[1])))]


# ---------------------------------------------------------------- a job


def in_checkout(command: list[str]) -> list[str]:
    """`command` with this checkout importable as installed and the kit's spares on PYTHONPATH (as smoke_tiny.sh)."""
    return ["bash", "-c", f'source {HERE}/checkout_path.sh && source {HERE}/kit_spares.sh && exec "$@"', "_", *command]


def launch_args(spec: str, model: Path) -> list[str]:
    """The card's tiny smoke overlay (verl_recipes/smoke/run.py), resumable, then RUN_ARGS."""
    from verl_recipes import catalog
    from verl_recipes.check.weights import SAVE_LAST_STEP
    from verl_recipes.smoke.run import overlay_args

    name, _, variant = spec.partition(":")
    recipe = catalog.get(name, None, variant or None)
    return [a for a in overlay_args(recipe, True, str(model)) if a not in SAVE_LAST_STEP] + RUN_ARGS


def poll(condition, timeout_s: float, every_s: float = POLL_S, alive=lambda: True):
    """condition()'s first truthy value within timeout_s while alive(), else None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    return None


class Run:
    """One launch of `python -m verl_recipes run`, its output in `log`."""

    def __init__(self, command: list[str], env: dict, log: Path):
        self.log = log
        self.started = time.time()  # its launch record is written after this
        with open(log, "w") as out:  # a session of its own: the kit's timeout must not kill it before end() does
            self.proc = subprocess.Popen(in_checkout(command), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.sid: int | None = None

    def table(self) -> list[Proc]:
        table = snapshot(self.proc.pid)
        self.sid = self.sid or verl_session(table, self.proc.pid)
        return table

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def end(self, wait_s: float = supervisor.CLEANUP_S) -> None:
        """As the supervisor ends a run: verl's session, then the launcher (its own cleanup done)."""
        self.table()  # verl's session, if not seen yet
        if self.sid:
            supervisor.end_session(self.sid, wait_s)
        if self.wait(wait_s + 20) is None:
            self.proc.kill()
            self.proc.wait()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def trim(self) -> None:
        if self.log.stat().st_size > LOG_TAIL:
            with open(self.log, "rb") as f:
                f.seek(-LOG_TAIL, os.SEEK_END)
                tail = f.read()
            self.log.write_bytes(tail)


def send(proc: Proc, sig: signal.Signals) -> bool:
    """False when the process is gone already: a sandbox run may end between the scan and the signal."""
    try:
        os.kill(proc.pid, sig)
        return True
    except ProcessLookupError:
        return False


def strike(run: Run, fault: str, kind: Kind, checkpoints: Path) -> tuple[Proc | None, Path | None, float]:
    """Find the target and hit it: (its process or None when none came, the folder being saved, when)."""
    if fault != "driver_during_save":
        def found_and_hit() -> Proc | None:
            proc = target(run.table(), kind.role)
            return proc if proc and send(proc, kind.sig) else None

        return poll(found_and_hit, INJECT_TIMEOUT_S, FIND_POLL_S, run.alive), None, time.monotonic()
    # the TaskRunner found first, so the kill lands while the save is being written
    proc = poll(lambda: target(run.table(), kind.role), INJECT_TIMEOUT_S, alive=run.alive)
    step = newest_step(checkpoints)
    cut = proc and poll(lambda: saving(checkpoints, step), INJECT_TIMEOUT_S, SAVE_POLL_S, run.alive)
    return (proc, cut, time.monotonic()) if cut and send(proc, kind.sig) else (None, None, 0.0)


def hit(run: Run, fault: str, kind: Kind, checkpoints: Path, gpus: str) -> dict | None:
    """Strike the target, time the run's end (a sandbox call's: the run's next step), list what is left on its GPUs
    SETTLE_S after: the fault's record, less what its relaunch shows. None when no target came."""
    proc, cut, struck = strike(run, fault, kind, checkpoints)
    if proc is None:
        return None
    rec = {"fault": fault, "role": kind.role, "pid": proc.pid, "title": " ".join(proc.cmd)[:200],
           "watched": proc.sid == run.sid, "signal": kind.sig.name, "bound_s": kind.bound_s}
    if kind.ends:
        rc = run.wait(kind.bound_s + HANG_S)
        rec["detect_s"] = round(time.monotonic() - struck, 1) if rc is not None else None
    else:
        step = newest_step(checkpoints)
        rec["trained_after"] = bool(poll(lambda: newest_step(checkpoints) > step, kind.bound_s, alive=run.alive))
        rc = run.proc.poll()
    if run.alive():
        run.end()
    ended = time.monotonic()
    rec.update(rc=rc, message=supervisor_line(run.text()))
    if kind.named:
        rec["expected_message"] = supervisor.Fault(kind.role, proc.pid, kind.what).message()
    if cut:
        rec.update(cut=cut.name, cut_short=not ckpt.is_complete(cut))
    time.sleep(max(0.0, ended + SETTLE_S - time.monotonic()))
    rec.update(gpu_processes_left=compute_apps(gpus), resumed=None, log=run.log.name)
    for app in rec["gpu_processes_left"]:  # recorded; the next launch needs its GPUs back
        try:
            os.kill(app["pid"], signal.SIGKILL)
        except OSError:
            pass
    return rec


def start_s(measured: float | None, prior: float = START_S) -> float:
    """The time a launch is given: `prior` until the job has measured one of its own."""
    return prior if measured is None else measured * START_MARGIN


def next_launch(fault: str | None, pending: bool, left_s: float, start: float = START_S) -> tuple[str | None, bool, str]:
    """What a chain's next launch does with left_s seconds to its deadline, a launch taking `start` to its first
    checkpoint: (the fault it takes, None for a plain relaunch; whether it launches; a line saying what was left
    out). A fault that no longer fits still leaves the relaunch that shows the last one resumed (2026-12-02: 276 s
    were left, the engine's relaunch needed 225 and the chain stopped before it, so that record failed "not
    relaunched")."""
    kind, note = KINDS.get(fault), ""
    if kind and start + kind.bound_s + SETTLE_S > left_s:
        fault, note = None, f"{left_s:.0f} s left, {start + kind.bound_s + SETTLE_S:.0f} s needed; stopping before {fault}"
    if fault is None and not pending:
        return None, False, note
    if start > left_s:
        return None, False, f"{left_s:.0f} s left, {start:.0f} s needed; stopping before the last relaunch"
    return fault, True, note


@dataclass(frozen=True)
class Setup:
    """What every launch of a job shares."""
    spec: str
    tiny: Path
    env: dict
    run_dir: Path  # the recipe's run folder under RL_RUNS_DIR
    gpus: str
    about: dict  # mode, recipe, hardware, date: every record has them

    def command(self, extra: list[str] = ()) -> list[str]:
        name, _, variant = self.spec.partition(":")
        return [sys.executable, "-m", "verl_recipes", "run", name, "--variant", variant, "--resume", "auto",
                "--args", shlex.join([*launch_args(self.spec, self.tiny / "model"), *extra])]


def prepare(spec: str, label: str, out: Path, work: Path) -> Setup:
    """The recipe's tiny model and data in work/tiny (built once), its runs in work/runs."""
    from verl_recipes import catalog

    name, _, variant = spec.partition(":")
    (out / "logs").mkdir(parents=True, exist_ok=True)
    tiny, runs = work / "tiny", work / "runs"
    if not tiny.exists():
        with open(out / "logs" / f"{label}.build.log", "w") as log:
            subprocess.run(in_checkout([sys.executable, "-m", "verl_recipes.smoke.tiny", str(tiny), "--recipe", spec]),
                           cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True)
    env = {**os.environ, "RL_DATA_DIR": str(tiny / "data"), "RL_RUNS_DIR": str(runs), "PYTHONUNBUFFERED": "1"}
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True).stdout.splitlines()
    about = {"mode": mode_of(spec), "recipe": spec, "hardware": hardware([n.strip() for n in names if n.strip()], gpus),
             "date": time.strftime("%Y-%m-%d")}
    return Setup(spec, tiny, env, runs / catalog.get(name, None, variant or None).run_name, gpus, about)


def deadline() -> float:
    return float(os.environ.get("GPU_DEADLINE", time.time() + 86400))


def job(spec: str, faults: list[str], out: Path, work: Path) -> int:
    from verl_recipes.resume import CHECKPOINTS

    label = job_name(spec, faults)
    setup = prepare(spec, label, out, work)
    checkpoints = setup.run_dir / CHECKPOINTS
    pending: dict | None = None  # the last fault's record, until a relaunch shows whether it resumed
    run, measured = None, None  # measured: the first launch's start-up to its first trained step
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the kit's timeout: end the run in `finally`
    try:
        for n, fault in enumerate([*faults, None]):  # None: the relaunch that shows the last fault resumed
            fault, go, note = next_launch(fault, pending is not None, deadline() - time.time(), start_s(measured))
            if note:
                print(f"[faults] {label}: {note}", flush=True)
            if not go:
                break
            kind = KINDS.get(fault)
            base = ckpt.newest_complete(checkpoints)[0]
            run = Run(setup.command(), setup.env, out / "logs" / f"{label}.{n}.log")
            after = ckpt.step(base) if base else 0
            trained = poll(lambda run=run, after=after: newest_step(checkpoints) > after
                           and logged_step(setup.run_dir, run.started) > after, START_TIMEOUT_S, alive=run.alive)
            if trained and measured is None:
                measured = time.time() - run.started
            if pending:
                launch = last_launch(setup.run_dir)
                pending.update(checkpoint=base.name if base else None, resumed=resumed(launch, base, bool(trained)),
                               relaunch_metrics=f"{label}.{n}.jsonl")
                if "cut" in pending:
                    pending["passed_over"] = passed_over(launch, pending["cut"])
                write(pending, out)
                pending = None
            rec = hit(run, fault, kind, checkpoints, setup.gpus) if trained and kind else None
            if run.alive():
                run.end()
            run.trim()
            keep_metrics(setup.run_dir, run.started, out / resume_match.METRICS / f"{label}.{n}.jsonl")
            if rec is None:
                if kind:
                    print(f"[faults] {label}: launch {n} {'found no ' + kind.role if trained else 'trained no step'} "
                          f"(exit {run.proc.returncode}); see {run.log.name}", flush=True)
                break
            rec = {**setup.about, **rec}
            write(rec, out)  # again once the relaunch shows whether it resumed
            pending = rec if kind.ends else None
    finally:
        if run and run.alive():
            run.end(2.0)  # the kit's timeout kills this job 10 s after its SIGTERM
    return 0


def rollout_seed(setup: Setup) -> int:
    from verl_recipes import catalog
    from verl_recipes.compose import compose

    name, _, variant = setup.spec.partition(":")
    recipe = catalog.get(name, None, variant or None)
    return int(compose(recipe, launch_args(setup.spec, setup.tiny / "model")).actor_rollout_ref.rollout.seed)


def earlier_runs(path: Path, rec: dict, out: Path) -> dict:
    """The runs an earlier reference job of the same recipe, steps and seeds left complete in OUT (its record and
    metrics, copied there from results/faults): which -> {metrics, log, hardware, date}. One GPU session holds a chain
    or the two runs, not both (2026-12-08: the second seed did not fit), so a later one makes only what is missing."""
    if not path.is_file():
        return {}
    old = json.loads(path.read_text())
    if [old.get(key) for key in ("recipe", "steps", "seeds")] != [rec[key] for key in ("recipe", "steps", "seeds")]:
        return {}
    return {which: {"metrics": name, "log": old["logs"][which],
                    **old.get("runs", {}).get(which, {"hardware": old["hardware"], "date": old["date"]})}
            for which, name in old["metrics"].items()
            if max(resume_match.read_steps(out / resume_match.METRICS / name), default=0) >= rec["steps"]}


def reference(spec: str, steps: int, out: Path, work: Path) -> int:
    """A chain's launch left uninterrupted to `steps` steps, in a runs folder of its own, twice: with the recipe's
    rollout seed (the run a relaunch must match) and with the next (the noise). Writes OUT/reference[-<mode>].json
    and the two runs' metrics for tests/gpu/resume_match.py. A run an earlier record in OUT already holds is kept."""
    mode = mode_of(spec)
    label = job_name(spec, [REFERENCE])
    setup = prepare(spec, label, out, work)
    own = rollout_seed(setup)
    seeds = {"own": own, "other": own + 1}
    rec = {**setup.about, "seeds": seeds, "steps": steps, "metrics": {}, "logs": {}, "runs": {}}
    path = out / resume_match.record_name(REFERENCE, mode)
    made = earlier_runs(path, rec, out)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run, measured = None, None  # measured: the first run's time to its last step
    try:
        for which, seed in seeds.items():
            if which in made:
                earlier = made[which]
                rec["metrics"][which], rec["logs"][which] = earlier.pop("metrics"), earlier.pop("log")
                rec["runs"][which] = earlier
                print(f"[faults] {label}: seed {seed} kept from the earlier record ({earlier['hardware']}, "
                      f"{earlier['date']})", flush=True)
                continue
            need = start_s(measured, START_S + (steps - 1) * STEP_S)
            if deadline() - time.time() < need:
                print(f"[faults] {label}: {deadline() - time.time():.0f} s left, {need:.0f} s needed; "
                      f"stopping before the seed {seed} run", flush=True)
                break
            extra = [] if which == "own" else [f"actor_rollout_ref.rollout.seed={seed}"]
            runs = work / f"{REFERENCE}-s{seed}"
            run = Run(setup.command(extra), {**setup.env, "RL_RUNS_DIR": str(runs)}, out / "logs" / f"{label}.s{seed}.log")
            run_dir = runs / setup.run_dir.name
            if poll(lambda run=run, run_dir=run_dir: logged_step(run_dir, run.started) >= steps,
                    START_TIMEOUT_S + steps * STEP_S, alive=run.alive) and measured is None:
                measured = time.time() - run.started
            if run.alive():
                run.end()
            run.trim()
            rec["metrics"][which] = f"{label}.s{seed}.jsonl"
            rec["logs"][which] = run.log.name
            rec["runs"][which] = {"hardware": setup.about["hardware"], "date": setup.about["date"]}
            kept = keep_metrics(run_dir, run.started, out / resume_match.METRICS / rec["metrics"][which])
            print(f"[faults] {label}: seed {seed} logged {logged_step(run_dir, run.started) if kept else 0} of "
                  f"{steps} steps; see {run.log.name}", flush=True)
    finally:
        if run and run.alive():
            run.end(2.0)
        path.write_text(json.dumps(rec, indent=1) + "\n")
    return 0


def job_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="faults.py job", description="one chain of faults (see faults.py)")
    parser.add_argument("recipe", help="RECIPE[:VARIANT]")
    parser.add_argument("faults", help="FAULT[,FAULT...] in order")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/faults/out"))
    parser.add_argument("--work", default="", help="tiny model and runs folder (default /tmp/faults/work/<job>)")
    ns = parser.parse_args(argv)
    faults = ns.faults.split(",")
    unknown = [f for f in faults if f not in KINDS]
    if unknown:
        parser.error(f"unknown fault(s) {unknown}; known: {', '.join(KINDS)}")
    work = Path(ns.work or f"/tmp/faults/work/{job_name(ns.recipe, faults)}")
    return job(ns.recipe, faults, Path(ns.out), work)


def reference_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"faults.py {REFERENCE}", description=reference.__doc__)
    parser.add_argument("recipe", help="RECIPE[:VARIANT], as its chains")
    parser.add_argument("--steps", type=int, default=REFERENCE_STEPS)
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/faults/out"))
    parser.add_argument("--work", default="", help="tiny model and runs folder (default /tmp/faults/work/<job>)")
    ns = parser.parse_args(argv)
    if ns.steps < FIRST_NOISE_STEPS:
        parser.error(f"--steps {ns.steps}: the noise needs two steps a resume can land on, so {FIRST_NOISE_STEPS} or more")
    work = Path(ns.work or f"/tmp/faults/work/{job_name(ns.recipe, [REFERENCE])}")
    return reference(ns.recipe, ns.steps, Path(ns.out), work)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["job"]:
        return job_main(argv[1:])
    if argv[:1] == [REFERENCE]:
        return reference_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seconds", type=int)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--faults", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--chain", type=int, default=2, help="faults a run chain takes in turn (one GPU lane each)")
    parser.add_argument("--reference", action=argparse.BooleanOptionalAction, default=True,
                        help="each mode's reference runs, which resume_match.py compares the relaunches with")
    parser.add_argument("--out", default="/tmp/faults/out", help="records and logs, on the machine")
    parser.add_argument("--dry-run", action="store_true", help="print the side_by_side.sh jobs; run nothing")
    ns = parser.parse_args(argv)
    stagger = float(os.environ.get("STAGGER_S", "15"))
    try:
        laid = gpu_queue.lay_out(queue_jobs(plan(ns.modes, ns.faults, ns.chain, ns.reference), ns.out), ns.gpus,
                                 stagger)
    except ValueError as err:
        parser.error(str(err))
    if not laid:
        parser.error("no fault of --faults runs in --modes (the sandbox runs colocated only)")
    took = gpu_queue.finish_s(laid)
    if took > ns.seconds:
        parser.error(f"the layout takes about {took:.0f} s > {ns.seconds} s: give more seconds, fewer --modes or "
                     f"--faults, or another --chain")
    jobs = [placed.line() for placed in laid]
    if ns.dry_run:
        for placed in laid:
            print(placed.planned())
        print(f"# {len(jobs)} jobs on {ns.gpus} GPUs: about {took:.0f} s")
        return 0
    os.execvp("bash", ["bash", str(HERE / "side_by_side.sh"), str(ns.seconds), *jobs])


if __name__ == "__main__":
    raise SystemExit(main())

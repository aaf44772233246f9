"""The launcher as supervisor of a local run: a dead or stopped worker ends the run, which verl 0.9.1 would wait on
without a limit (a vLLM engine is a subprocess that Ray does not watch; verl's rollout client awaits it forever).

verl runs in a session of its own; every process of the run (Ray's, verl's workers, vLLM's engines) stays in it.
Each poll names the session's processes by role from their titles (Ray's `ray::<actor class>`, vLLM's
`VLLM::<process>`). A role process that is gone while verl has not ended by itself GRACE_S later, or one stopped
(SIGSTOP, state T) for STOPPED_S, ends the run: one line names the role, pid, host and what to do next, the session
gets SIGTERM, then SIGKILL. A role that ends as verl ends is verl's own shutdown, not a fault; a long step, a slow
first compile or a long validation changes no process, so nothing here can end a healthy run. When verl exits,
whatever of the session is left after CLEANUP_S is killed, so no GPU process outlives the run.
A Ray actor's death usually ends verl by itself first (Ray raises ActorDiedError in the driver within a second or two,
before GRACE_S): when verl exits non-zero, the supervisor reads Ray's report of the death from the run's log and
prints the same one line. A vLLM subprocess's death does too (its engine fails verl's pending call within seconds,
results/faults/vllm_worker.2026-11-28.json): then the line names the role of vLLM's own report in the log, when that report
precedes verl's traceback (a shutdown that follows an unrelated error reports deaths after it), with the pid of the
process of that role the supervisor saw gone.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

# process title prefix -> the role a message names (verl 0.9.1's actor classes, vLLM 0.24's process titles)
ROLES = (
    ("VLLM::EngineCore", "vLLM engine"),
    ("VLLM::Worker", "vLLM GPU worker"),
    ("ray::vLLMHttpServer", "vLLM server"),
    ("ray::WorkerDict", "actor/ref worker"),
    ("ray::AgentLoopWorker", "agent loop"),
    ("ray::RewardLoopWorker", "reward worker"),
    ("ray::CheckpointEngineWorker", "weight sync worker"),
)
POLL_S = 2.0
GRACE_S = 20.0  # a role gone this long while verl runs on: verl is not shutting down, it is waiting on the dead
STOPPED_S = 30.0
CLEANUP_S = 10.0
KILLED_S = 5.0  # how long a SIGKILLed process may take to end (a process in uninterruptible I/O takes a while)
NEXT = "the run cannot go on: `make <recipe>` (RESUME=auto) resumes it from its last complete checkpoint"


ACTOR_DIED = "The actor died unexpectedly before finishing this task."
LOG_TAIL = 1 << 20  # bytes of the log read for Ray's report: a traceback sits at its end
# vLLM 0.24's reports of a subprocess's death (v1/executor/multiproc_executor.py, v1/engine/core_client.py) -> role
VLLM_DEATHS = (
    (re.compile(r"Worker proc VllmWorker-\d+ died unexpectedly"), "vLLM GPU worker"),
    (re.compile(r"Engine core proc \S+ died unexpectedly"), "vLLM engine"),
)
# the driver's own traceback (Hydra's error line, then Python's), unprefixed, unlike the lines Ray relays from actors
DRIVER_ERROR = re.compile(r"^(Error executing job|Traceback \(most recent call last\):)", re.M)


@dataclass
class Fault:
    role: str
    pid: int
    what: str  # "died" or "stopped"
    host: str = ""  # where Ray reported it; this machine's name when empty

    def message(self) -> str:
        return f"[supervisor] the {self.role} (pid {self.pid or '?'} on {node_name(self.host)}) {self.what}; {NEXT}"


def node_name(address: str) -> str:
    """Where a process ran, as a user knows it: Ray reports an actor's node by address, which on a single node is
    one of this machine's (2026-12-08: 192.0.2.2 for a worker on host `vm`), named then by the machine's name."""
    local = {addr.address for addrs in psutil.net_if_addrs().values() for addr in addrs}
    return socket.gethostname() if not address or address in local else address


def reported_death(text: str) -> Fault | None:
    """The actor of Ray's last ActorDiedError report in `text` (its class_name, pid and ip lines), as a Fault."""
    at = text.rfind(ACTOR_DIED)
    if at < 0:
        return None
    report = "\n".join(text[at:].splitlines()[1:10])
    fields = {key: m.group(1) for key in ("class_name", "pid", "ip") if (m := re.search(rf"\b{key}: (\S+)", report))}
    if "class_name" not in fields:
        return None
    # verl builds its colocated worker class inside a function: Ray names it by its qualified name,
    # `create_colocated_worker_cls.<locals>.WorkerDict`, while its process title is `ray::WorkerDict`
    role = role_titled(f"ray::{fields['class_name'].rsplit('.', 1)[-1]}") or f"Ray actor {fields['class_name']}"
    return Fault(role, int(fields.get("pid", 0)), "died", fields.get("ip", ""))


def vllm_death(text: str, gone: dict[str, int]) -> Fault | None:
    """The first vLLM subprocess death that vLLM reported in `text` before the driver's traceback, as a Fault with the
    pid of the process of that role in `gone` (role -> pid, as watch found them); None when there is none."""
    end = m.start() if (m := DRIVER_ERROR.search(text)) else len(text)
    found = [(m.start(), role) for pattern, role in VLLM_DEATHS if (m := pattern.search(text, 0, end))]
    if not found:
        return None
    role = min(found)[1]
    return Fault(role, gone.get(role, 0), "died")


def role_titled(title: str) -> str | None:
    return next((role for prefix, role in ROLES if title.startswith(prefix)), None)


def role_of(proc: psutil.Process) -> str | None:
    try:
        title = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return role_titled(title)


def session(sid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return found


def gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stopped(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


def watch(driver: subprocess.Popen, poll_s: float = POLL_S, grace_s: float = GRACE_S,
          stopped_s: float = STOPPED_S) -> tuple[Fault | None, dict[str, int]]:
    """Poll the driver's session until the driver exits (no Fault) or a role process dies or stays stopped (the
    Fault); with it, role -> pid of the first process of each role found gone while the driver ran."""
    seen: dict[int, tuple[str, psutil.Process]] = {}
    gone_roles: dict[str, int] = {}
    since: dict[int, float] = {}  # pid -> when it was first found gone or stopped
    while driver.poll() is None:
        now = time.monotonic()
        for proc in session(driver.pid):
            if proc.pid not in seen and (role := role_of(proc)):
                seen[proc.pid] = (role, proc)
        for pid, (role, proc) in seen.items():
            state = "died" if gone(proc) else "stopped" if stopped(proc) else None
            if not state:
                since.pop(pid, None)
                continue
            if state == "died":
                gone_roles.setdefault(role, pid)
            if now - since.setdefault(pid, now) >= (grace_s if state == "died" else stopped_s):
                return Fault(role, pid, state), gone_roles
        try:
            driver.wait(timeout=poll_s)
        except subprocess.TimeoutExpired:
            pass
    return None, gone_roles


def end_session(sid: int, wait_s: float) -> list[int]:
    """SIGTERM to the session's processes (SIGCONT first, for a stopped one), then SIGKILL to what is left after
    wait_s; returns the pids that needed SIGKILL."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        for proc in session(sid):
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
    deadline = time.monotonic() + wait_s
    while session(sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    killed = []
    for proc in session(sid):
        try:
            proc.kill()
            killed.append(proc)
        except psutil.Error:
            pass
    # SIGKILL is delivered, not done: return once each has ended (a zombie has), so none outlives the call
    deadline = time.monotonic() + KILLED_S
    while not all(gone(proc) for proc in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [proc.pid for proc in killed]


def run(command: list[str], cwd: Path, env: dict, log: Path) -> int:
    """Run verl supervised; its output goes to this console and to `log`, where the supervisor looks for the death
    that made verl fail. Returns its exit code, or 1 when the supervisor ended it (a killed verl may exit 0)."""
    driver = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace")

    def copy() -> None:
        with open(log, "w", buffering=1) as out:  # line by line: the log is whole when verl's last line is out
            for line in driver.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                out.write(line)

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    try:
        fault, gone_roles = watch(driver, POLL_S, GRACE_S, STOPPED_S)
    except KeyboardInterrupt:  # verl's own session does not see the terminal's Ctrl-C: pass it on
        os.killpg(driver.pid, signal.SIGINT)
        driver.wait()
        end_session(driver.pid, CLEANUP_S)
        raise
    if fault:
        print(fault.message(), flush=True)
        end_session(driver.pid, CLEANUP_S)
    code = driver.wait()
    if code and not fault:
        copier.join(timeout=5)  # verl's last lines, its traceback, reach the log
        with open(log, "rb") as text:
            text.seek(max(0, log.stat().st_size - LOG_TAIL))
            tail = text.read().decode(errors="replace")
            if died := reported_death(tail) or vllm_death(tail, gone_roles):
                print(died.message(), flush=True)
    left = end_session(driver.pid, CLEANUP_S)
    if left:
        print(f"[supervisor] killed {len(left)} process(es) of the run left {CLEANUP_S:.0f} s after verl exited: "
              f"{left}", flush=True)
    copier.join(timeout=5)
    return (code or 1) if fault else code

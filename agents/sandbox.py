"""Run untrusted (model-written) Python code locally, bounded in time, memory, processes, output,
files and access. The child side is agents/sandbox_child.py; only the standard library is used.

Each run gets (namespace mode, the default):
- new pid, mount, network, ipc and uts namespaces (plus a user namespace when not root): no network
  at all, no view of other processes, and every process of the run dies with it;
- a chroot jail on a size-limited tmpfs that holds only read-only /usr, /lib*, /bin, the Python
  interpreter, its site-packages and a few /dev nodes; the working directory is the jail's /sandbox (also TMPDIR);
- an unprivileged, per-run random uid when the trainer is root (the same uid otherwise, mapped in
  the user namespace), no_new_privs, and an empty environment (no trainer secrets);
- its own cgroup (agents/sandbox_cgroup.py, v2 or v1), which bounds the whole run whatever
  the number of its processes: memory (resident + the jail's tmpfs; an OOM kills the whole run), processes and
  threads, a CPU quota (max_cpus), and CPU time, which is counted there and enforced here. Where the host
  delegates no cgroups, a warning says so and only the rlimits below apply, per process;
- rlimits per process: CPU time, address space, file size, open files, processes/threads;
- a wall-clock deadline enforced here, and stdout/stderr capped while reading;
- a CPython audit hook (defense in depth, not a boundary) that turns attempts to start processes,
  open sockets, load ctypes or touch files outside the working directory into clear errors.

A run dies with its trainer, whatever kills the trainer: the launcher and the run's init each get a death signal
from the kernel (and check their parent right after arming it); a launcher whose trainer died kills the run and
removes its jail directory and cgroups. What a killed launcher leaves (both killed at once) is removed when the
next LocalSandbox starts: run directories and cgroups are named after the owner's pid and start time.

Calls beyond max_concurrency wait for a slot at most queue_timeout_s, then return status queue_timeout unrun.

Weak mode (`weak_sandbox_for_trusted_models_only=True`; used only when namespaces cannot be created, e.g. in a
default Docker container) keeps the rlimits, the cgroups (where available), the clean environment, the deadline,
the output caps and the audit hook, but runs the code as the trainer's uid on the host filesystem, with the
network and the trainer's processes in reach. It is not a sandbox against a model: the audit hook is the only
barrier there, and Python code can get around it. Use it only for a model you trust, or use SandboxFusion instead.
"""

import asyncio
import dataclasses
import json
import logging
import math
import os
import secrets
import selectors
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from verl_recipes.agents import sandbox_cgroup, sandbox_child

logger = logging.getLogger(__name__)

PYTHON = os.path.realpath(sys.executable)
CHILD_SCRIPT = os.path.realpath(sandbox_child.__file__)
# Per-run uids for a root trainer: unused by any real account, so RLIMIT_NPROC counts only this run.
SANDBOX_UID_BASE, SANDBOX_UID_COUNT = 1_000_000_000, 1_000_000_000
LAUNCHER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
KILL_GRACE_S = 2.0  # after a kill, how long to wait for the run's processes to close their pipes
CGROUP_POLL_S = 0.1  # how often a run's cgroup is read (CPU time, OOM kills) while it runs
QUEUE_TIMEOUT_S = 120.0  # default longest wait for a free slot
RUN_PREFIX = "verl-sandbox-"  # + "<owner pid>.<owner start time>-<random>": jail directories and run cgroups
NAMESPACE_HELP = (
    "run the trainer as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
    "on Ubuntu >= 23.10 also kernel.apparmor_restrict_unprivileged_userns=0; in Docker use --privileged or a "
    "seccomp profile that allows unshare), or set sandbox_fusion_url to use a SandboxFusion server; only for a "
    "model you trust: weak_sandbox_for_trusted_models_only: true (the code then runs as the trainer's user on the "
    "host, behind an audit hook that Python code can remove)"
)
WEAK_MODE_WARNING = (
    "Linux namespaces are unavailable: the local sandbox falls back to WEAK MODE (weak_sandbox_for_trusted_models_only"
    " is set). Model code now runs as the trainer's user on the host filesystem, with network access, behind rlimits, "
    "cgroups where available and a Python audit hook that Python code can remove: not a sandbox against the model."
)


class SandboxUnavailableError(RuntimeError):
    """The sandbox itself cannot run (an infrastructure problem, not a problem of the code)."""


class NamespacesUnavailableError(SandboxUnavailableError):
    """This host does not let us create the Linux namespaces that namespace mode needs."""


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    wall_time_s: float = 10.0
    cpu_time_s: float = 10  # the whole run (cgroup), and each process (rlimit)
    memory_mb: int = 1024  # the whole run, resident + tmpfs (cgroup), and each process's address space (rlimit)
    max_output_bytes: int = 64 * 1024  # per stream; the run is stopped when exceeded
    max_file_mb: int = 16  # largest file the code may write
    max_disk_mb: int = 64  # the whole jail tmpfs (namespace mode)
    max_processes: int = 32  # processes + threads: the whole run with its init (cgroup), and the run's uid (rlimit)
    max_open_files: int = 256
    max_cpus: float = 1.0  # CPU quota of the whole run (cgroup)

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"SandboxLimits.{field.name} must be a positive number, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    status: str  # ok | timeout | memory | error | output_truncated | queue_timeout
    exit_code: int | None
    stdout: str
    stderr: str
    wall_time_s: float
    message: str = ""  # why, when status is not ok; it names the limit that was hit
    cpu_time_s: float | None = None  # the whole run's, where it had a cgroup


class _CappedBuffer:
    def __init__(self, limit):
        self.limit, self.data, self.overflow = limit, bytearray(), False

    def add(self, chunk):
        room = self.limit - len(self.data)
        self.data += chunk[:room]
        self.overflow = self.overflow or len(chunk) > room
        return not self.overflow

    def text(self):
        return self.data.decode("utf-8", errors="replace")


def _site_dirs():
    paths = sysconfig.get_paths()
    return sorted({os.path.realpath(paths["purelib"]), os.path.realpath(paths["platlib"])})


def _start_time(pid):
    """Process `pid`'s start time (clock ticks since boot), or None if there is none: with the pid, it names one
    process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[19]
    except OSError:
        return None


def _owner_tag(pid):
    return f"{pid}.{_start_time(pid)}"


def _owner_alive(run_name):
    """Whether the trainer named in `run_name` (RUN_PREFIX + owner tag + "-...") still runs."""
    pid, _, start = run_name[len(RUN_PREFIX) :].partition("-")[0].partition(".")
    return not pid.isdigit() or _start_time(int(pid)) == start  # a name we did not make: not ours to remove


def _remove_stale_runs(cgroups):
    """Remove what runs of dead trainers left (both their trainer and launcher were killed at once)."""
    tempdir = tempfile.gettempdir()
    names = {name for name in os.listdir(tempdir) if name.startswith(RUN_PREFIX)}
    names |= cgroups.names(RUN_PREFIX) if cgroups else set()
    for name in sorted(names):
        if not _owner_alive(name):
            left = sandbox_child.remove_run(os.path.join(tempdir, name), cgroups.run(name).paths if cgroups else [])
            logger.info("local sandbox: removed %s, left by a dead trainer%s", name, f" (not: {left})" if left else "")


def _wait_exited(pid, deadline):
    """Wait until `pid` has exited, without reaping it (its pgid must stay reserved for killpg)."""
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
            return True
        time.sleep(0.005)
    return False


def _kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _status_of(exit_code, limits):
    if exit_code == 0:
        return "ok", ""
    if exit_code == sandbox_child.MEMORY_EXIT_CODE:
        return "memory", f"memory limit of {limits.memory_mb} MB exceeded"
    if exit_code == 128 + signal.SIGXCPU:
        return "timeout", f"CPU time limit of {limits.cpu_time_s} s exceeded"
    try:  # the launcher reports a death by signal N as exit code 128 + N
        return "error", f"killed by {signal.Signals(exit_code - 128).name}"
    except ValueError:
        return "error", f"exit code {exit_code}"


def _run_status(stop_reason, exit_code, usage, limits):
    """(status, message) of a finished run: the limit it hit first, named."""
    if usage is not None and usage.oom_kills:
        return "memory", f"killed: run memory limit of {limits.memory_mb} MB exceeded"
    if stop_reason == "cpu":
        return "timeout", f"killed: run CPU time limit of {limits.cpu_time_s} s exceeded"
    if stop_reason == "timeout":
        status, message = "timeout", f"wall time limit of {limits.wall_time_s} s exceeded"
    elif stop_reason == "output":
        status, message = "output_truncated", f"output exceeded {limits.max_output_bytes} bytes"
    else:
        status, message = _status_of(exit_code, limits)
    if usage is not None and usage.process_limit_hits and status != "ok":
        message += f"; the run reached its limit of {limits.max_processes} processes and threads"
    return status, message


class BoundedRunner:
    """Runs code through `_run_once`, at most `max_concurrency` runs at a time (threads or asyncio). A call that gets
    no slot within `queue_timeout_s` returns status queue_timeout without running, instead of stalling its caller."""

    def __init__(self, limits: SandboxLimits, max_concurrency: int, queue_timeout_s: float):
        if not isinstance(max_concurrency, int) or isinstance(max_concurrency, bool) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be a positive integer, got {max_concurrency!r}")
        if not isinstance(queue_timeout_s, (int, float)) or isinstance(queue_timeout_s, bool) or queue_timeout_s <= 0:
            raise ValueError(f"queue_timeout_s must be a positive number of seconds, got {queue_timeout_s!r}")
        self.limits = limits
        self.max_concurrency = max_concurrency
        self.queue_timeout_s = queue_timeout_s
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._executor = None

    def run(self, code: str) -> SandboxResult:
        return self._run_queued(code, time.monotonic())

    async def run_async(self, code: str) -> SandboxResult:
        # A private pool: blocking runs must not starve the event loop's default executor.
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix=type(self).__name__)
        job = self._executor.submit(self._run_queued, code, time.monotonic())
        result = asyncio.wrap_future(job)
        try:
            return await asyncio.wait_for(asyncio.shield(result), self.queue_timeout_s)
        except TimeoutError:
            if job.cancel():  # still waiting for a thread of the pool
                return self._queue_timeout_result()
            return await result  # running, or waiting for a slot until its own deadline

    def _run_queued(self, code, queued_at):
        if not self._slots.acquire(timeout=max(0.0, queued_at + self.queue_timeout_s - time.monotonic())):
            return self._queue_timeout_result()
        try:
            return self._run_once(code)
        finally:
            self._slots.release()

    def _queue_timeout_result(self):
        message = f"not run: all {self.max_concurrency} sandbox slots stayed busy for {self.queue_timeout_s} s"
        return SandboxResult("queue_timeout", None, "", "", 0.0, message)

    def _run_once(self, code: str) -> SandboxResult:
        raise NotImplementedError


class LocalSandbox(BoundedRunner):
    """Runs Python code in a fresh sandboxed interpreter per call (see the module docstring).

    `audit_hook=False` leaves the CPython audit hook out: only for tests that attack the kernel layer alone."""

    def __init__(
        self,
        limits: SandboxLimits = SandboxLimits(),
        max_concurrency: int = 8,
        queue_timeout_s: float = QUEUE_TIMEOUT_S,
        *,
        weak_sandbox_for_trusted_models_only: bool = False,
        site_packages: bool = True,
        audit_hook: bool = True,
    ):
        super().__init__(limits, max_concurrency, queue_timeout_s)
        self.weak_sandbox_for_trusted_models_only = weak_sandbox_for_trusted_models_only
        self.site_dirs = _site_dirs() if site_packages else []
        self.audit_hook = audit_hook
        self.mode = "namespaces"  # switches to "weak" once, if namespaces fail and weak is allowed
        try:
            probe_name = f"{RUN_PREFIX}{_owner_tag(os.getpid())}-probe{secrets.token_hex(4)}"
            self.cgroups = sandbox_cgroup.find_cgroups(probe_name)
            logger.info("local sandbox: per-run limits in %s", self.cgroups.describe())
        except sandbox_cgroup.CgroupsUnavailableError as e:
            self.cgroups = None
            logger.warning(
                "local sandbox: no per-run cgroups (%s). Falling back to per-process rlimits: a run of up to %d "
                "processes may use up to that many times its memory and CPU time limits",
                e,
                limits.max_processes,
            )
        _remove_stale_runs(self.cgroups)

    def _run_once(self, code):
        try:
            return self._run_in_mode(code)
        except NamespacesUnavailableError:
            if self.mode == "weak" or not self.weak_sandbox_for_trusted_models_only:
                raise
            logger.warning(WEAK_MODE_WARNING)
            self.mode = "weak"
            return self._run_in_mode(code)

    def _child_config(self, jail_dir, cgroup, status_fd):
        limits = self.limits
        namespaces = self.mode == "namespaces"
        expose = {os.path.realpath(sys.base_prefix), os.path.dirname(PYTHON), CHILD_SCRIPT, *self.site_dirs}
        return {
            "mode": self.mode,
            "jail_dir": jail_dir,
            "cgroup_procs": cgroup.procs_files if cgroup else [],
            "cgroup_dirs": cgroup.paths if cgroup else [],
            "python": PYTHON,
            "child_script": CHILD_SCRIPT,
            "expose": sorted(expose),
            "site_dirs": self.site_dirs,
            "audit_hook": self.audit_hook,
            "uid": SANDBOX_UID_BASE + secrets.randbelow(SANDBOX_UID_COUNT) if namespaces and os.getuid() == 0 else None,
            "status_fd": status_fd,
            "parent_pid": os.getpid(),
            "limits": {
                "cpu_s": math.ceil(limits.cpu_time_s),
                "memory_bytes": int(limits.memory_mb * 2**20),
                "file_bytes": int(limits.max_file_mb * 2**20),
                "disk_bytes": int(limits.max_disk_mb * 2**20),
                "processes": int(limits.max_processes),
                "open_files": int(limits.max_open_files),
            },
        }

    def _create_cgroup(self, cgroup):
        limits = self.limits
        try:
            cgroup.create(int(limits.memory_mb * 2**20), int(limits.max_processes), limits.max_cpus)
        except OSError as e:
            raise SandboxUnavailableError(f"the local sandbox could not create the run's cgroup: {e}") from e

    def _run_in_mode(self, code):
        jail_dir = tempfile.mkdtemp(prefix=f"{RUN_PREFIX}{_owner_tag(os.getpid())}-")
        cgroup = self.cgroups.run(os.path.basename(jail_dir)) if self.cgroups else None
        status_r, status_w = os.pipe()
        try:
            with open(os.path.join(jail_dir, "main.py"), "w", encoding="utf-8", errors="replace") as f:
                f.write(code)
            if cgroup is not None:
                self._create_cgroup(cgroup)
            cfg = json.dumps(self._child_config(jail_dir, cgroup, status_w))
            start = time.monotonic()
            try:
                proc = subprocess.Popen(
                    [PYTHON, "-I", "-S", "-X", "utf8", CHILD_SCRIPT, "setup", cfg],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=LAUNCHER_ENV,
                    cwd="/",
                    start_new_session=True,
                    pass_fds=(status_w,),
                )
            finally:
                os.close(status_w)
            with proc:
                try:
                    stop_reason, out, err = self._collect(proc, start + self.limits.wall_time_s, cgroup)
                finally:
                    _kill_group(proc.pid)  # whatever happened, leave no process of the run behind
                exit_code = proc.wait()
            wall_time = time.monotonic() - start
            usage = cgroup.usage() if cgroup else None
            with os.fdopen(status_r, "rb") as status:
                status_r = None
                setup_error = status.read().decode(errors="replace")
        finally:
            if status_r is not None:
                os.close(status_r)
            left = sandbox_child.remove_run(jail_dir, cgroup.paths if cgroup else [])
            if left:
                logger.warning("local sandbox: cannot remove the run cgroups %s; they go once this process ends", left)
        if setup_error.startswith(sandbox_child.NAMESPACE_ERROR):
            raise NamespacesUnavailableError(f"the local sandbox could not start: {setup_error}; {NAMESPACE_HELP}")
        if setup_error:
            raise SandboxUnavailableError(f"the local sandbox could not start: {setup_error}")
        if stop_reason is not None:
            exit_code = None  # stopped by us, not exited on its own
        status, message = _run_status(stop_reason, exit_code, usage, self.limits)
        cpu_time = usage.cpu_time_s if usage else None
        return SandboxResult(status, exit_code, out.text(), err.text(), round(wall_time, 3), message, cpu_time)

    def _run_limit_hit(self, cgroup):
        """The run limit its cgroup says the run went over, if any (v1 kills one process on OOM, we the rest)."""
        if cgroup.oom_kills():
            return "memory"
        if cgroup.cpu_time_s() > self.limits.cpu_time_s:
            return "cpu"
        return None

    def _collect(self, proc, deadline, cgroup):
        """Read stdout/stderr until both close and the launcher exits; stop the run at the deadline, on too much
        output, or over a run limit."""
        buffers = {proc.stdout.fileno(): _CappedBuffer(self.limits.max_output_bytes)}
        buffers[proc.stderr.fileno()] = _CappedBuffer(self.limits.max_output_bytes)
        stop_reason = None
        with selectors.DefaultSelector() as selector:
            for fd in buffers:
                selector.register(fd, selectors.EVENT_READ)
            while stop_reason is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    stop_reason = "timeout"
                    break
                wait = min(remaining, CGROUP_POLL_S)
                if selector.get_map():
                    for key, _ in selector.select(wait):
                        chunk = os.read(key.fd, 65536)
                        if not chunk:
                            selector.unregister(key.fd)
                        elif not buffers[key.fd].add(chunk) and stop_reason is None:
                            stop_reason = "output"
                elif _wait_exited(proc.pid, time.monotonic() + wait):
                    break
                if stop_reason is None and cgroup is not None:
                    stop_reason = self._run_limit_hit(cgroup)
            if stop_reason is not None:
                os.kill(proc.pid, signal.SIGTERM)  # the launcher kills and reaps its child
                _wait_exited(proc.pid, time.monotonic() + KILL_GRACE_S)
            _kill_group(proc.pid)  # leftovers; the leader is not reaped yet, so this pgid is still ours
            if cgroup is not None:
                sandbox_child.kill_cgroup_members(cgroup.paths)  # also those that left the session (weak mode)
            grace_end = time.monotonic() + KILL_GRACE_S
            while selector.get_map() and time.monotonic() < grace_end:  # drain until the pipes close
                for key, _ in selector.select(max(grace_end - time.monotonic(), 0)):
                    if not os.read(key.fd, 65536):
                        selector.unregister(key.fd)
        return stop_reason, *buffers.values()

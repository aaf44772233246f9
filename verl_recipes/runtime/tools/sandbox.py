"""Run untrusted (model-written) Python code locally, bounded in time, memory, processes, output,
files and access. The child side is verl_recipes/runtime/tools/sandbox_child.py; only the standard library is used.

Each run gets (namespace mode, the default):
- new pid, mount, network, ipc and uts namespaces (plus a user namespace when not root): no network
  at all, no view of other processes, and every process of the run dies with it;
- a chroot jail on a size-limited tmpfs that holds only read-only /usr, /lib*, /bin, the Python
  interpreter, its site-packages and a few /dev nodes; the working directory is the jail's /sandbox (also TMPDIR);
- an unprivileged, per-run random uid when the trainer is root (the same uid otherwise, mapped in
  the user namespace), no_new_privs, and an empty environment (no trainer secrets);
- rlimits: CPU time, address space, file size, open files, processes/threads;
- a wall-clock deadline enforced here, and stdout/stderr capped while reading;
- a CPython audit hook (defense in depth, not a boundary) that turns attempts to start processes,
  open sockets, load ctypes or touch files outside the working directory into clear errors.

Weak mode (`allow_weak_sandbox=True`, used only when namespaces cannot be created, e.g. in a
default Docker container) keeps the rlimits, the clean environment, the deadline, the output caps
and the audit hook, but runs as the trainer's uid on the host filesystem: a determined attacker
can get around the audit hook. Use it only for trusted models, or use SandboxFusion instead.
"""

import asyncio
import dataclasses
import json
import logging
import math
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from verl_recipes.runtime.tools import sandbox_child

logger = logging.getLogger(__name__)

PYTHON = os.path.realpath(sys.executable)
CHILD_SCRIPT = os.path.realpath(sandbox_child.__file__)
# Per-run uids for a root trainer: unused by any real account, so RLIMIT_NPROC counts only this run.
SANDBOX_UID_BASE, SANDBOX_UID_COUNT = 1_000_000_000, 1_000_000_000
LAUNCHER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
KILL_GRACE_S = 2.0  # after a kill, how long to wait for the run's processes to close their pipes
NAMESPACE_HELP = (
    "run the trainer as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
    "on Ubuntu >= 23.10 also kernel.apparmor_restrict_unprivileged_userns=0; in Docker use --privileged or a "
    "seccomp profile that allows unshare), or set allow_weak_sandbox: true (rlimits + audit hook only, same uid), "
    "or set sandbox_fusion_url to use a SandboxFusion server"
)


class SandboxUnavailableError(RuntimeError):
    """The sandbox itself cannot run (an infrastructure problem, not a problem of the code)."""


class NamespacesUnavailableError(SandboxUnavailableError):
    """This host does not let us create the Linux namespaces that namespace mode needs."""


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    wall_time_s: float = 10.0
    cpu_time_s: float = 10
    memory_mb: int = 1024  # address space of the user process
    max_output_bytes: int = 64 * 1024  # per stream; the run is stopped when exceeded
    max_file_mb: int = 16  # largest file the code may write
    max_disk_mb: int = 64  # the whole jail tmpfs (namespace mode)
    max_processes: int = 32  # processes + threads (namespace mode)
    max_open_files: int = 256

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"SandboxLimits.{field.name} must be a positive number, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    status: str  # ok | timeout | memory | error | output_truncated
    exit_code: int | None
    stdout: str
    stderr: str
    wall_time_s: float
    message: str = ""  # why, when status is not ok


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


class BoundedRunner:
    """Runs code through `_run_once` with at most `max_concurrency` runs at a time (threads or asyncio)."""

    def __init__(self, limits: SandboxLimits, max_concurrency: int):
        if not isinstance(max_concurrency, int) or isinstance(max_concurrency, bool) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be a positive integer, got {max_concurrency!r}")
        self.limits = limits
        self.max_concurrency = max_concurrency
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._executor = None

    def run(self, code: str) -> SandboxResult:
        with self._slots:
            return self._run_once(code)

    async def run_async(self, code: str) -> SandboxResult:
        # A private pool: blocking runs must not starve the event loop's default executor.
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix=type(self).__name__)
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.run, code)

    def _run_once(self, code: str) -> SandboxResult:
        raise NotImplementedError


class LocalSandbox(BoundedRunner):
    """Runs Python code in a fresh sandboxed interpreter per call (see the module docstring)."""

    def __init__(
        self,
        limits: SandboxLimits = SandboxLimits(),
        max_concurrency: int = 8,
        allow_weak_sandbox: bool = False,
        site_packages: bool = True,
    ):
        super().__init__(limits, max_concurrency)
        self.allow_weak_sandbox = allow_weak_sandbox
        self.site_dirs = _site_dirs() if site_packages else []
        self.mode = "namespaces"  # switches to "weak" once, if namespaces fail and weak is allowed

    def _run_once(self, code):
        try:
            return self._run_in_mode(code)
        except NamespacesUnavailableError:
            if self.mode == "weak" or not self.allow_weak_sandbox:
                raise
            logger.warning("Linux namespaces are unavailable; the local sandbox falls back to weak mode")
            self.mode = "weak"
            return self._run_in_mode(code)

    def _child_config(self, jail_dir, status_fd):
        limits = self.limits
        namespaces = self.mode == "namespaces"
        expose = {os.path.realpath(sys.base_prefix), os.path.dirname(PYTHON), CHILD_SCRIPT, *self.site_dirs}
        return {
            "mode": self.mode,
            "jail_dir": jail_dir,
            "python": PYTHON,
            "child_script": CHILD_SCRIPT,
            "expose": sorted(expose),
            "site_dirs": self.site_dirs,
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

    def _run_in_mode(self, code):
        jail_dir = tempfile.mkdtemp(prefix="sandbox-")
        status_r, status_w = os.pipe()
        try:
            with open(os.path.join(jail_dir, "main.py"), "w", encoding="utf-8", errors="replace") as f:
                f.write(code)
            cfg = json.dumps(self._child_config(jail_dir, status_w))
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
                    stop_reason, out, err = self._collect(proc, start + self.limits.wall_time_s)
                finally:
                    _kill_group(proc.pid)  # whatever happened, leave no process of the run behind
                exit_code = proc.wait()
            wall_time = time.monotonic() - start
            with os.fdopen(status_r, "rb") as status:
                status_r = None
                setup_error = status.read().decode(errors="replace")
        finally:
            if status_r is not None:
                os.close(status_r)
            shutil.rmtree(jail_dir, ignore_errors=True)
        if setup_error.startswith(sandbox_child.NAMESPACE_ERROR):
            raise NamespacesUnavailableError(f"the local sandbox could not start: {setup_error}; {NAMESPACE_HELP}")
        if setup_error:
            raise SandboxUnavailableError(f"the local sandbox could not start: {setup_error}")
        if stop_reason is not None:
            exit_code = None  # stopped by us, not exited on its own
        if stop_reason == "timeout":
            status, message = "timeout", f"wall time limit of {self.limits.wall_time_s} s exceeded"
        elif stop_reason == "output":
            status, message = "output_truncated", f"output exceeded {self.limits.max_output_bytes} bytes"
        else:
            status, message = _status_of(exit_code, self.limits)
        return SandboxResult(status, exit_code, out.text(), err.text(), round(wall_time, 3), message)

    def _collect(self, proc, deadline):
        """Read stdout/stderr until both close; stop the run at the deadline or on too much output."""
        buffers = {proc.stdout.fileno(): _CappedBuffer(self.limits.max_output_bytes)}
        buffers[proc.stderr.fileno()] = _CappedBuffer(self.limits.max_output_bytes)
        stop_reason = None
        with selectors.DefaultSelector() as selector:
            for fd in buffers:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map() and stop_reason is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    stop_reason = "timeout"
                for key, _ in selector.select(max(remaining, 0)):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fd)
                    elif not buffers[key.fd].add(chunk) and stop_reason is None:
                        stop_reason = "output"
            if stop_reason is None and not _wait_exited(proc.pid, deadline):
                stop_reason = "timeout"
            if stop_reason is not None:
                os.kill(proc.pid, signal.SIGTERM)  # the launcher kills and reaps its children
                _wait_exited(proc.pid, time.monotonic() + KILL_GRACE_S)
            _kill_group(proc.pid)  # leftovers; the leader is not reaped yet, so this pgid is still ours
            grace_end = time.monotonic() + KILL_GRACE_S
            while selector.get_map() and time.monotonic() < grace_end:  # drain until the pipes close
                for key, _ in selector.select(max(grace_end - time.monotonic(), 0)):
                    if not os.read(key.fd, 65536):
                        selector.unregister(key.fd)
        return stop_reason, *buffers.values()

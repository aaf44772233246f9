"""The local sandbox's contract (agents/sandbox.py): results, limits, modes and concurrency.
Hostile code is in tests/test_sandbox_security.py."""

import asyncio
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from verl_recipes.agents import sandbox_cgroup
from verl_recipes.agents.sandbox import (
    NAMESPACE_HELP,
    BoundedRunner,
    LocalSandbox,
    NamespacesUnavailableError,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
)
from verl_recipes.agents.sandbox_child import NAMESPACE_ERROR

LIMITS = SandboxLimits(wall_time_s=3.0, cpu_time_s=2, memory_mb=256, max_output_bytes=4096, max_disk_mb=8)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def sandbox():
    box = LocalSandbox(LIMITS, max_concurrency=8)
    try:
        box.run("pass")
    except SandboxUnavailableError as e:
        pytest.skip(str(e))
    return box


@pytest.mark.parametrize(
    "code, status, exit_code, stdout",
    [
        ("print('a'); print('b')", "ok", 0, "a\nb\n"),
        ("import sys; print('x'); sys.exit(3)", "error", 3, "x\n"),
        ("raise SystemExit(0)", "ok", 0, ""),
        ("input()", "error", 1, ""),  # stdin is empty
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "error", 128 + 11, ""),
        ("import sys; sys.exit(200)", "error", 200, ""),
        ("open('f.txt', 'w').write('kept'); print(open('f.txt').read())", "ok", 0, "kept\n"),
    ],
)
def test_result_reports_status_exit_code_and_output(sandbox, code, status, exit_code, stdout):
    result = sandbox.run(code)
    assert (result.status, result.exit_code, result.stdout) == (status, exit_code, stdout)


def test_signal_exit_is_named(sandbox):
    assert sandbox.run("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)").message == "killed by SIGSEGV"


def test_each_run_starts_from_an_empty_working_directory(sandbox):
    sandbox.run("open('left_over.txt', 'w').write('x')")
    assert sandbox.run("import os; print(sorted(os.listdir('.')))").stdout == "['main.py']\n"


@pytest.mark.slow
def test_wall_time_limit_returns_in_time_with_partial_output(sandbox):
    start = time.monotonic()
    result = sandbox.run("import time\nprint('started', flush=True)\ntime.sleep(60)")
    assert time.monotonic() - start < LIMITS.wall_time_s + 3
    assert (result.status, result.stdout, result.exit_code) == ("timeout", "started\n", None)
    assert result.message == "wall time limit of 3.0 s exceeded"


@pytest.fixture
def rlimits_only(monkeypatch):
    """A host that delegates no cgroups: runs are bounded by per-process rlimits only."""

    def no_cgroups(probe_name):
        raise sandbox_cgroup.CgroupsUnavailableError("no cgroup v2 mount; no cgroup v1 hierarchy for memory")

    monkeypatch.setattr(sandbox_cgroup, "find_cgroups", no_cgroups)


def test_without_cgroups_a_warning_names_the_fallback(rlimits_only, caplog):
    with caplog.at_level(logging.WARNING):
        box = LocalSandbox(LIMITS)
    assert box.cgroups is None
    assert "no per-run cgroups (no cgroup v2 mount; no cgroup v1 hierarchy for memory)" in caplog.text
    assert "Falling back to per-process rlimits" in caplog.text
    result = box.run("print(1)")
    assert (result.stdout, result.cpu_time_s) == ("1\n", None)


def test_cpu_time_limit_is_reported_as_timeout(rlimits_only):
    box = LocalSandbox(SandboxLimits(wall_time_s=20, cpu_time_s=1))
    result = box.run("while True: pass")
    assert (result.status, result.exit_code) == ("timeout", 128 + 24)  # SIGXCPU
    assert result.message == "CPU time limit of 1 s exceeded"


def test_output_cap_keeps_the_head(sandbox):
    result = sandbox.run("print('first'); print('y' * 10**6)")
    assert result.status == "output_truncated"
    assert result.stdout.startswith("first\n") and len(result.stdout) == 4096


def test_result_is_a_plain_record(sandbox):
    result = sandbox.run("print(1)")
    assert isinstance(result, SandboxResult) and result.wall_time_s > 0 and result.message == ""


@pytest.mark.parametrize(
    "field, value", [("wall_time_s", 0), ("memory_mb", -1), ("max_output_bytes", "big"), ("cpu_time_s", True)]
)
def test_bad_limits_are_rejected_with_the_field_name(field, value):
    with pytest.raises(ValueError, match=f"SandboxLimits.{field} must be a positive number"):
        SandboxLimits(**{field: value})


@pytest.mark.parametrize("value", [0, -2, 1.5, True])
def test_bad_concurrency_is_rejected(value):
    with pytest.raises(ValueError, match="max_concurrency must be a positive integer"):
        LocalSandbox(max_concurrency=value)


def test_site_packages_are_importable():
    box = LocalSandbox(SandboxLimits(wall_time_s=60, cpu_time_s=60))  # the imports are slow on 2 busy cores
    result = box.run("import numpy, sympy\nprint(int(numpy.arange(5).sum()), sympy.factorint(360))")
    assert (result.status, result.stdout) == ("ok", "10 {2: 3, 3: 2, 5: 1}\n")


def test_site_packages_can_be_left_out():
    box = LocalSandbox(LIMITS, site_packages=False)
    result = box.run("import numpy")
    assert result.status == "error" and "ModuleNotFoundError" in result.stderr


@pytest.mark.slow
def test_concurrent_runs_are_bounded_and_do_not_deadlock(sandbox):
    codes = ["import time; time.sleep(0.3); print('done')"] * 24
    before = time.monotonic()
    with ThreadPoolExecutor(24) as pool:
        results = list(pool.map(sandbox.run, codes))
    assert [r.stdout for r in results] == ["done\n"] * 24
    assert time.monotonic() - before < 30


class _SleepRunner(BoundedRunner):
    """Each run sleeps 0.5 s: the queue without the cost of real runs."""

    def _run_once(self, code):
        time.sleep(0.5)
        return SandboxResult("ok", 0, code, "", 0.5)


def _queued_twice(run_async):
    runner = _SleepRunner(LIMITS, max_concurrency=1, queue_timeout_s=0.1)
    start = time.monotonic()
    if run_async:

        async def main():
            return await asyncio.gather(runner.run_async("first"), runner.run_async("second"))

        first, second = asyncio.run(main())
    else:
        with ThreadPoolExecutor(2) as pool:
            first, second = pool.map(runner.run, ["first", "second"])
    return first, second, time.monotonic() - start


@pytest.mark.parametrize("run_async", [False, True])
def test_a_call_that_waits_too_long_for_a_slot_returns_a_clear_status(run_async):
    first, second, elapsed = _queued_twice(run_async)
    assert (first.status, first.stdout) == ("ok", "first")
    assert (second.status, second.stdout, second.exit_code) == ("queue_timeout", "", None)
    assert second.message == "not run: all 1 sandbox slots stayed busy for 0.1 s"
    assert elapsed < 1.0  # the second call did not run after the first


@pytest.mark.parametrize("value", [0, -1, "60", True])
def test_bad_queue_timeout_is_rejected(value):
    with pytest.raises(ValueError, match="queue_timeout_s must be a positive number of seconds"):
        LocalSandbox(LIMITS, queue_timeout_s=value)


def test_run_async_does_not_use_the_event_loops_default_executor():
    box = LocalSandbox(LIMITS, max_concurrency=3)
    closed = ThreadPoolExecutor(1)
    closed.shutdown()  # anything scheduled on the default executor would fail

    async def main():
        asyncio.get_running_loop().set_default_executor(closed)
        return await asyncio.gather(*(box.run_async(f"print({i})") for i in range(6)))

    assert [r.stdout for r in asyncio.run(main())] == [f"{i}\n" for i in range(6)]


def test_setup_failure_is_an_infrastructure_error_without_weak_fallback():
    box = LocalSandbox(SandboxLimits(max_disk_mb=1e-6), weak_sandbox_for_trusted_models_only=True)  # a one-page jail
    with pytest.raises(SandboxUnavailableError, match="cannot build the sandbox filesystem.*No space left"):
        box.run("#" * 20000)  # no room for main.py
    assert box.mode == "namespaces"  # only missing namespaces may switch to weak mode


@pytest.mark.parametrize("weak_allowed", [True, False])
def test_weak_mode_is_used_only_when_allowed(monkeypatch, caplog, weak_allowed):
    box = LocalSandbox(LIMITS, weak_sandbox_for_trusted_models_only=weak_allowed)
    real_run = LocalSandbox._run_in_mode

    def namespaces_fail(self, code):
        if self.mode == "namespaces":
            raise NamespacesUnavailableError(f"{NAMESPACE_ERROR}: [Errno 1] Operation not permitted; {NAMESPACE_HELP}")
        return real_run(self, code)

    monkeypatch.setattr(LocalSandbox, "_run_in_mode", namespaces_fail)
    if weak_allowed:
        with caplog.at_level(logging.WARNING):
            assert box.run("print(1)").stdout == "1\n"
        assert box.mode == "weak"
        assert "falls back to WEAK MODE" in caplog.text and "not a sandbox against the model" in caplog.text
    else:
        with pytest.raises(
            NamespacesUnavailableError, match="sandbox_fusion_url.*weak_sandbox_for_trusted_models_only"
        ):
            box.run("print(1)")
        assert box.mode == "namespaces"


@pytest.fixture()
def weak_sandbox():
    box = LocalSandbox(LIMITS, weak_sandbox_for_trusted_models_only=True)
    box.mode = "weak"
    return box


@pytest.mark.parametrize(
    "code, status, text",
    [
        ("print(6 * 7)", "ok", "42"),
        ("open('/etc/passwd').read()", "error", "sandbox: reading '/etc/passwd' is not allowed"),
        ("import socket; socket.socket()", "error", "sandbox: socket.__new__ is not allowed"),
        ("import os; os.fork()", "error", "sandbox: starting processes is not allowed"),
        ("x = bytearray(2**30)", "memory", "MemoryError"),
        ("print('z' * 10**6)", "output_truncated", "zzz"),
    ],
)
def test_weak_mode_keeps_limits_and_audit_hook(weak_sandbox, code, status, text):
    result = weak_sandbox.run(code)
    assert result.status == status
    assert text in result.stdout + result.stderr


@pytest.mark.slow
def test_weak_mode_hides_secrets_and_kills_escaped_sessions(weak_sandbox, monkeypatch):
    monkeypatch.setenv("FAKE_SECRET", "weak-secret")
    assert "weak-secret" not in weak_sandbox.run("import os; print(os.environ)").stdout
    result = weak_sandbox.run("import os, time; os.setsid(); print(os.getpid(), flush=True); time.sleep(60)")
    assert result.status == "timeout"
    pid = int(result.stdout)
    deadline = time.monotonic() + 2
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the escaped process survived"
        time.sleep(0.05)


def _world_readable(path):
    while path != "/":
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        path = os.path.dirname(path)
    return True


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
    reason="needs root, setpriv and a system python to start an unprivileged trainer",
)
def test_unprivileged_trainer_gets_a_user_namespace():
    agents = os.path.join(REPO, "agents")
    if not _world_readable(agents) or os.path.realpath("/usr/bin/python3") == sys.executable:
        pytest.skip("the repo or a separate system python is not reachable by an unprivileged user")
    script = (  # the system python has no install of ours: map agents/ to verl_recipes.agents as pyproject does
        f"import importlib.util, sys; sys.path.insert(0, {REPO!r})\n"
        f"spec = importlib.util.spec_from_file_location('verl_recipes.agents', {agents + '/__init__.py'!r}, "
        f"submodule_search_locations=[{agents!r}])\n"
        "sys.modules['verl_recipes.agents'] = importlib.util.module_from_spec(spec)\n"
        "from verl_recipes.agents.sandbox import LocalSandbox, SandboxLimits\n"
        "r = LocalSandbox(SandboxLimits(wall_time_s=2, cpu_time_s=1), site_packages=False).run(\n"
        "    'import os; print(os.getuid(), os.getpid(), sorted(os.listdir(\".\")))')\n"
        "print(r.status, r.stdout, r.stderr)"
    )
    command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/", env={"PATH": "/usr/bin:/bin"})
    if "Operation not permitted" in out.stdout + out.stderr:
        pytest.skip("unprivileged user namespaces are disabled on this host")
    assert out.stdout.split() == ["ok", "65534", "2", "['main.py']"], out.stdout + out.stderr

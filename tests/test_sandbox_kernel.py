"""The local sandbox's kernel layer on its own (agents/sandbox.py): every attack here runs with
the CPython audit hook left out (`audit_hook=False`), as if the model had got around it, so what stops it is the
namespaces, the jail, the per-run uid, the rlimits and the run's cgroup. The figures in recipes/retool-qwen25-7b/
README.md (The code sandbox) come from these tests.
"""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil
import pytest

from verl_recipes.agents import sandbox_cgroup
from verl_recipes.agents.sandbox import (
    RUN_PREFIX,
    LocalSandbox,
    SandboxLimits,
    SandboxUnavailableError,
    _owner_tag,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMITS = SandboxLimits(wall_time_s=10, cpu_time_s=1, memory_mb=200, max_processes=16, max_disk_mb=8)
CLEANUP_BOUND_S = 3.0  # the "within seconds"


@pytest.fixture(scope="module")
def kernel_only():
    box = LocalSandbox(LIMITS, audit_hook=False, site_packages=False)
    try:
        box.run("pass")
    except SandboxUnavailableError as e:  # a host without usable Linux namespaces
        pytest.skip(str(e))
    return box


@pytest.fixture(scope="module")
def run_cgroups(kernel_only):
    if kernel_only.cgroups is None:  # find out why, for the skip reason
        with pytest.raises(sandbox_cgroup.CgroupsUnavailableError) as why:
            sandbox_cgroup.find_cgroups(f"{RUN_PREFIX}test-probe")
        pytest.skip(f"this host delegates no cgroups to the sandbox: {why.value}")
    return kernel_only


def _code(text):
    return textwrap.dedent(text).strip("\n")


def test_children_touching_memory_hit_the_run_memory_limit(run_cgroups):
    # 4 x 100 MB: within each process's 200 MB address-space rlimit, twice the run's 200 MB
    result = run_cgroups.run(
        _code("""
            import os, time
            for i in range(4):
                if os.fork() == 0:
                    data = b'x' * (100 * 2**20)
                    time.sleep(30)
                    os._exit(0)
            time.sleep(30)
        """)
    )
    assert (result.status, result.message) == ("memory", "killed: run memory limit of 200 MB exceeded")
    assert result.wall_time_s < 5


def test_the_jails_tmpfs_counts_toward_the_run_memory_limit(run_cgroups):
    box = LocalSandbox(
        SandboxLimits(wall_time_s=10, memory_mb=100, max_disk_mb=400, max_file_mb=400),
        audit_hook=False,
        site_packages=False,
    )
    result = box.run("with open('big', 'wb') as f:\n    for i in range(300):\n        f.write(b'x' * 2**20)")
    assert (result.status, result.message) == ("memory", "killed: run memory limit of 100 MB exceeded")


def test_a_fork_loop_stops_at_the_run_process_limit(run_cgroups):
    result = run_cgroups.run(
        _code("""
            import os, time
            forks = 0
            while True:
                try:
                    pid = os.fork()
                except OSError:
                    print(forks, flush=True)
                    raise
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                forks += 1
        """)
    )
    # 16 counts the run's init and the first process: 14 forks. (The per-uid rlimit would allow 15.)
    assert (result.status, result.stdout) == ("error", "14\n")
    assert result.message == "exit code 1; the run reached its limit of 16 processes and threads"
    assert "BlockingIOError" in result.stderr


def test_a_cpu_burner_per_child_hits_the_run_cpu_limit_and_quota(run_cgroups):
    result = run_cgroups.run(
        _code("""
            import os
            for i in range(4):
                if os.fork() == 0:
                    break
            while True:
                pass
        """)
    )
    # per-process rlimits alone would let each of the 5 burners use 1 s
    assert (result.status, result.message) == ("timeout", "killed: run CPU time limit of 1 s exceeded")
    assert result.cpu_time_s < LIMITS.cpu_time_s + 0.5
    assert result.cpu_time_s < result.wall_time_s * LIMITS.max_cpus + 0.2  # one CPU for the whole run


def _alive(process):
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _run_tree(owner, count, timeout_s=30):
    """The launcher started by `owner` and its descendants, once there are `count` of them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        launchers = owner.children()
        tree = launchers[:1] + (launchers[0].children(recursive=True) if launchers else [])
        if len(tree) == count:
            return tree
        time.sleep(0.02)
    raise AssertionError(f"the run did not start: {tree}")


def _gone(tree, paths, since):
    """Wait until no process of `tree` runs and none of `paths` exists; the time it took."""
    while any(map(_alive, tree)) or any(map(os.path.exists, paths)):
        assert time.monotonic() - since < CLEANUP_BOUND_S, f"left behind: {[p for p in tree if _alive(p)]}, {paths}"
        time.sleep(0.01)
    return time.monotonic() - since


@pytest.mark.parametrize("launcher_too", [False, True], ids=["owner", "owner_and_launcher"])
def test_a_run_dies_with_its_owner(kernel_only, tmp_path, monkeypatch, launcher_too):
    """The owner (a trainer) is SIGKILLed mid-run: the launcher, init, the user process and its child go, and so do
    the jail directory and the run's cgroups, within seconds. If the launcher is SIGKILLed too (a killed process
    group, a node-wide OOM), nothing removes them until the next sandbox starts."""
    owner_code = (
        "from verl_recipes.agents.sandbox import LocalSandbox, SandboxLimits\n"
        "box = LocalSandbox(SandboxLimits(wall_time_s=600, cpu_time_s=600), audit_hook=False, site_packages=False)\n"
        "box.run('import os, time\\nos.fork()\\ntime.sleep(600)')\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": REPO}
    owner, tree = subprocess.Popen([sys.executable, "-c", owner_code], env=env), []
    try:
        tree = _run_tree(psutil.Process(owner.pid), count=4)  # launcher, init, user process, its child
        [jail] = tmp_path.iterdir()
        cgroups = kernel_only.cgroups.run(jail.name).paths if kernel_only.cgroups else []
        assert all(map(os.path.isdir, cgroups))
        assert [int(open(f"/proc/{p.pid}/oom_score_adj").read()) for p in tree[1:]] == [1000] * 3
    finally:
        # both at once, as when their process group is killed: each is stopped before either is killed, since the
        # one that outlived the other by a moment would clean up as it should (the launcher on its owner's death, the
        # owner on its run's end). Killed one after the other, either order lost the jail now and then on 2 busy cores
        # (make test-fast and make test, 2026-11-29).
        victims = [owner.pid] + ([tree[0].pid] if launcher_too and tree else [])
        for signum in (signal.SIGSTOP, signal.SIGKILL):
            for pid in victims:
                os.kill(pid, signum)
    killed = time.monotonic()
    owner.wait()
    if not launcher_too:
        print(f"clean-up after the owner's death: {_gone(tree, [jail, *cgroups], killed):.3f} s")
        return
    print(f"processes gone after the owner's and launcher's death: {_gone(tree, [], killed):.3f} s")
    assert jail.exists()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    LocalSandbox(LIMITS)
    assert not jail.exists() and not any(map(os.path.exists, cgroups))


def test_what_dead_owners_left_is_removed_on_start(kernel_only, tmp_path, monkeypatch):
    """Both the owner and its launcher were killed at once: the next sandbox removes the jail directory and the
    cgroups, and kills what is left in them (weak mode has no pid namespace to do it)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with open("/proc/sys/kernel/pid_max") as f:
        no_such_pid = int(f.read())
    dead = f"{RUN_PREFIX}{no_such_pid}.1-abc"
    reused = f"{RUN_PREFIX}{os.getpid()}.1-abc"  # our pid, another start time: a dead owner's pid, reused
    live = f"{RUN_PREFIX}{_owner_tag(os.getpid())}-abc"
    for name in (dead, reused, live):
        (tmp_path / name).mkdir()
    cgroups = kernel_only.cgroups
    left_over = subprocess.Popen(["sleep", "60"])
    try:
        if cgroups:
            for path in cgroups.run(dead).paths + cgroups.run(live).paths:
                os.mkdir(path)
            for path in cgroups.run(dead).procs_files:
                with open(path, "w") as f:
                    f.write(str(left_over.pid))
        LocalSandbox(LIMITS)
        assert sorted(os.listdir(tmp_path)) == [live]
        if cgroups:
            assert left_over.wait(timeout=CLEANUP_BOUND_S) == -9
            assert not any(map(os.path.exists, cgroups.run(dead).paths))
            assert all(map(os.path.exists, cgroups.run(live).paths))
    finally:
        left_over.kill()
        if cgroups:
            for path in cgroups.run(live).paths:
                os.rmdir(path)

"""Hostile code against the local sandbox (agents/sandbox.py): every case must end inside its limits
with a clear result, leave nothing behind, and leave the calling process working.

All cases run once, concurrently, in a module fixture (that is also the concurrency test of a mix of
good and hostile code); each test then checks one case's result.
"""

import os
import socket
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from verl_recipes.agents.sandbox import LocalSandbox, SandboxLimits, SandboxUnavailableError

LIMITS = SandboxLimits(
    wall_time_s=3.0,
    cpu_time_s=2,
    memory_mb=256,
    max_output_bytes=64 * 1024,
    max_file_mb=1,
    max_disk_mb=8,
    max_processes=16,
)
END_BOUND_S = LIMITS.wall_time_s + 3.0  # a run may take its wall limit plus the kill and clean-up
SECRET = f"s3cr3t-{uuid.uuid4().hex}"
MARKER = f"/tmp/sandbox-escape-{uuid.uuid4().hex}"
HOME_MARKER = os.path.expanduser(f"~/sandbox-escape-{uuid.uuid4().hex}")
REPO_FILE = os.path.abspath(__file__)
IS_ROOT = os.geteuid() == 0
PRINT_UID = "import os; print('uid', os.getuid(), 'pid', os.getpid(), flush=True)\n"


def _cases(port, test_pid):
    """id -> code. Placeholders are filled in here so that every case is plain Python source."""
    return {
        "ok_print": "print('hello', 6 * 7)",
        "ok_unicode": "print('λ → ∞')",
        "syntax_error": "def f(:\n  pass",
        "exception_traceback": "def f():\n    return 1 / 0\nf()",
        "fork_bomb": "import os\nwhile True:\n    os.fork()",
        "fork_loop_multiprocessing": "import multiprocessing\nmultiprocessing.Pool(2).map(abs, [1, 2])",
        "import_multiprocessing": "import multiprocessing\nprint('imported', multiprocessing.cpu_count() > 0)",
        "subprocess_spawn": "import subprocess\nsubprocess.run(['/bin/echo', 'pwned'])",
        "os_system": "import os\nos.system('echo pwned')",
        "os_exec": "import os\nos.execv('/bin/echo', ['/bin/echo', 'pwned'])",
        "pty_spawn": "import pty\npty.spawn('/bin/sh')",
        "posixsubprocess_reimport": (
            "import _imp, glob, sys, importlib.machinery\n"
            "so = [p for d in sys.path for p in glob.glob(d + '/_posixsubprocess*.so')][0]\n"
            "_imp.create_dynamic(importlib.machinery.ModuleSpec('x._posixsubprocess', None, origin=so))"
        ),
        "daemon_double_fork": PRINT_UID + "if os.fork() == 0:\n    os.setsid()\n    os.fork()\n    os.pause()",
        "setsid_escape": PRINT_UID + "os.setsid()\nimport time\ntime.sleep(100)",
        "ignore_sigterm": (
            PRINT_UID + "import signal, time\n"
            "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):\n"
            "    signal.signal(s, signal.SIG_IGN)\n"
            "time.sleep(100)"
        ),
        "memory_bytearray": "x = bytearray(10 * 2**30)",
        "memory_list_growth": "x = []\nwhile True:\n    x.append(' ' * 2**20)",
        "infinite_loop": "while True:\n    pass",
        "c_spin": "sum(range(10**12))",
        "sleep_forever": "import time\ntime.sleep(10**6)",
        "huge_stdout": "import sys\nchunk = 'x' * 2**20\nfor _ in range(1024):\n    sys.stdout.write(chunk)",
        "huge_stderr": "import sys\nchunk = 'e' * 2**20\nfor _ in range(1024):\n    sys.stderr.write(chunk)",
        "huge_file": "with open('big.bin', 'wb') as f:\n    f.write(b'x' * 100 * 2**20)",
        "disk_fill": "for i in range(100):\n    open(f'part{i}.bin', 'wb').write(b'x' * 900 * 2**10)",
        "read_etc_passwd": "print(open('/etc/passwd').read())",
        "read_repo_file": f"print(open({REPO_FILE!r}).read())",
        "stat_repo_file": f"import os\nprint(os.stat({REPO_FILE!r}))",
        "write_tmp": f"open({MARKER!r}, 'w').write('escaped')\nprint(open({MARKER!r}).read())",
        "write_home": f"open({HOME_MARKER!r}, 'w').write('escaped')",
        "list_root": "import os\nprint(os.listdir('/'))",
        "symlink_escape": "import os\nos.symlink('/etc/passwd', 'p')\nprint(open('p').read())",
        "env_secrets": "import os\nprint(dict(os.environ))\nprint(open('/proc/self/environ', 'rb').read())",
        "parent_environ": (
            "import os\n"
            f"for pid in (os.getppid(), 1, {test_pid}):\n"
            "    try:\n"
            "        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
            "    except OSError as e:\n"
            "        print('denied', type(e).__name__)"
        ),
        "network_connect": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')",
        "dns_lookup": "import socket\nprint(socket.gethostbyname('example.com'))",
        "ctypes_libc_system": "import ctypes\nctypes.CDLL(None).system(b'echo pwned')",
        "ctypes_raw_syscall": "import ctypes\nprint(ctypes.CDLL(None).syscall(57))",
        "ctypes_load_libc": "import ctypes\nctypes.CDLL('libc.so.6')",
        "craft_code_object": "f = lambda: 0\nf.__code__.replace(co_code=b'\\x00')",
        "kill_parent": f"import os, signal\nos.kill({test_pid}, signal.SIGKILL)",
        "kill_process_group": "import os, signal\nos.killpg(0, signal.SIGKILL)",
        "threads_bomb": (
            "import threading, time\n"
            "while True:\n"
            "    threading.Thread(target=time.sleep, args=(100,), daemon=True).start()"
        ),
        "fake_setup_error": (
            "import os\n"
            "for fd in range(3, 256):\n"
            "    try:\n"
            "        os.write(fd, b'cannot create Linux namespaces')\n"
            "    except OSError:\n"
            "        pass\n"
            "print('tried')"
        ),
        "recursion_depth": "def f(n):\n    return f(n + 1)\nf(0)",
        "deep_recursion_unlimited": "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nf(0)",
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run every case at once from 32 threads through 8 sandbox slots."""
    sandbox = LocalSandbox(LIMITS, max_concurrency=8)
    try:
        sandbox.run("pass")
    except SandboxUnavailableError as e:  # a host without usable Linux namespaces
        pytest.skip(str(e))
    tempdir = tmp_path_factory.mktemp("jails")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    cases = _cases(listener.getsockname()[1], os.getpid())

    with listener, pytest.MonkeyPatch.context() as patch:
        patch.setenv("FAKE_SECRET", SECRET)  # visible to this process, must be invisible in the sandbox
        patch.setattr(tempfile, "tempdir", str(tempdir))  # jail dirs go here, so leftovers can be checked
        with ThreadPoolExecutor(32) as pool:
            results = dict(zip(cases, pool.map(sandbox.run, cases.values())))
        try:
            listener.accept()[0].close()
            connected = True
        except TimeoutError:
            connected = False
    return {"results": results, "connected": connected, "tempdir": tempdir}


def _processes_of(uid):
    return [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]


def _assert_nothing_survives(stdout):
    """The case printed its uid and pid: no process of that run may remain."""
    uid = int(stdout.split()[1])  # namespace mode as root: a per-run uid owns every process of the run
    deadline = time.monotonic() + 2
    while _processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_of(uid) == []


def _case(runs, name):
    result = runs["results"][name]
    assert result.wall_time_s < END_BOUND_S, f"{name} took {result.wall_time_s:.1f} s"
    return result


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, stdout_part",
    [
        ("ok_print", "hello 42"),
        ("ok_unicode", "λ → ∞"),
        ("import_multiprocessing", "imported True"),
        ("fake_setup_error", "tried"),  # the launcher's status pipe is out of reach
    ],
)
def test_good_code_runs(runs, name, stdout_part):
    result = _case(runs, name)
    assert (result.status, result.exit_code, result.stderr) == ("ok", 0, "")
    assert stdout_part in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, error_text",
    [
        ("syntax_error", "SyntaxError"),
        ("exception_traceback", "ZeroDivisionError: division by zero"),
        ("fork_bomb", "sandbox: starting processes is not allowed"),
        ("fork_loop_multiprocessing", "sandbox: starting processes is not allowed"),
        ("subprocess_spawn", "sandbox: starting processes is not allowed"),
        ("os_system", "sandbox: starting processes is not allowed"),
        ("os_exec", "sandbox: starting processes is not allowed"),
        ("pty_spawn", "out of pty devices"),  # pty swallows the audit hook's error; the jail has no /dev/ptmx
        ("posixsubprocess_reimport", "module 'x._posixsubprocess' is not available"),
        ("daemon_double_fork", "sandbox: starting processes is not allowed"),
        ("huge_file", "File too large"),
        ("read_etc_passwd", "sandbox: reading '/etc/passwd' is not allowed"),
        ("read_repo_file", "is not allowed"),
        ("write_home", "is not allowed"),
        ("list_root", "sandbox: reading '/' is not allowed"),
        ("symlink_escape", "sandbox: os.symlink is not allowed"),
        ("network_connect", "sandbox: socket"),
        ("dns_lookup", "sandbox: socket.gethostbyname is not allowed"),
        ("ctypes_libc_system", "sandbox: ctypes.dlsym is not allowed"),
        ("ctypes_raw_syscall", "sandbox: ctypes.dlsym is not allowed"),
        ("ctypes_load_libc", "loading native library 'libc.so.6' is not allowed"),
        ("craft_code_object", "sandbox: code.__new__ is not allowed"),
        ("kill_parent", "sending signals to other processes is not allowed"),
        ("kill_process_group", "sending signals to other processes is not allowed"),
        ("recursion_depth", "RecursionError"),
    ],
)
def test_hostile_code_gets_a_clear_error(runs, name, error_text):
    result = _case(runs, name)
    assert result.status == "error" and result.exit_code == 1
    assert error_text in result.stderr
    assert "sandbox_child.py" not in result.stderr  # tracebacks show only the model's code
    assert "pwned" not in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", ["infinite_loop", "c_spin", "sleep_forever", "setsid_escape", "ignore_sigterm"])
def test_runaway_code_is_stopped(runs, name):
    result = _case(runs, name)
    assert result.status == "timeout"
    assert "time limit" in result.message


@pytest.mark.slow
@pytest.mark.parametrize("name", ["setsid_escape", "ignore_sigterm", "daemon_double_fork"])
def test_no_process_survives_the_run(runs, name):
    if not IS_ROOT:
        pytest.skip("per-run uids exist only for a root trainer (the pid namespace still cleans up)")
    _assert_nothing_survives(_case(runs, name).stdout)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["memory_bytearray", "memory_list_growth"])
def test_memory_bombs_hit_the_memory_limit(runs, name):
    result = _case(runs, name)
    assert (result.status, result.message) == ("memory", "memory limit of 256 MB exceeded")
    assert "MemoryError" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name, stream", [("huge_stdout", "stdout"), ("huge_stderr", "stderr")])
def test_huge_output_is_cut_at_the_cap(runs, name, stream):
    result = _case(runs, name)
    assert result.status == "output_truncated"
    assert len(getattr(result, stream)) == LIMITS.max_output_bytes


@pytest.mark.slow
def test_disk_is_bounded(runs):
    result = _case(runs, "disk_fill")
    assert result.status == "error"
    assert "No space left on device" in result.stderr


@pytest.mark.slow
def test_threads_bomb_is_bounded(runs):
    result = _case(runs, "threads_bomb")
    assert result.status in ("error", "memory")
    assert "can't start new thread" in result.stderr or "MemoryError" in result.stderr


@pytest.mark.slow
def test_unbounded_recursion_is_bounded(runs):
    assert _case(runs, "deep_recursion_unlimited").status in ("error", "memory", "timeout")


@pytest.mark.slow
def test_files_outside_the_workdir_are_untouched(runs):
    result = _case(runs, "write_tmp")
    # the jail's root is the run's private tmpfs (namespace mode); the host's /tmp never sees the file
    assert not os.path.exists(MARKER)
    assert not os.path.exists(HOME_MARKER)
    assert result.status in ("ok", "error")


@pytest.mark.slow
def test_secrets_of_the_trainer_are_invisible(runs):
    for name in ("env_secrets", "parent_environ"):
        result = _case(runs, name)
        assert SECRET not in result.stdout + result.stderr
    assert "PermissionError" in _case(runs, "env_secrets").stderr  # /proc/self/environ


@pytest.mark.slow
def test_parent_environ_is_unreadable(runs):
    assert _case(runs, "parent_environ").stdout.count("denied") == 3


@pytest.mark.slow
def test_no_connection_reaches_the_host(runs):
    assert runs["connected"] is False


@pytest.mark.slow
def test_jail_hides_the_host_filesystem(runs):
    # os.stat is not audited: this is the kernel-level view of the run (the jail in namespace mode)
    result = _case(runs, "stat_repo_file")
    assert result.status == "error" and "FileNotFoundError" in result.stderr


@pytest.mark.slow
def test_runs_as_an_unprivileged_per_run_user(runs):
    uids = {int(_case(runs, name).stdout.split()[1]) for name in ("setsid_escape", "ignore_sigterm")}
    if IS_ROOT:
        assert 0 not in uids and len(uids) == 2
    else:
        assert uids == {os.getuid()}


@pytest.mark.slow
def test_jail_dirs_are_removed_and_caller_still_works(runs):
    assert list(runs["tempdir"].iterdir()) == []
    assert LocalSandbox(LIMITS).run("print(1 + 1)").stdout == "2\n"

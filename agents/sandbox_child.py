"""Child side of the local Python sandbox (the parent side is agents/sandbox.py).

Runs as `python -I -S -X utf8 sandbox_child.py <stage> <json>` and uses only the standard library,
because it starts before any site-packages are on the path. Process tree in namespace mode:

    launcher  (stage "setup": own session, new net/ipc/uts namespaces, + a user namespace when not root;
     |         gets SIGTERM from the kernel when the trainer thread that started it dies: it then kills the
     |         run, and removes the run's jail directory and cgroups itself, since the trainer cannot)
     +- init  (pid 1 of a new pid namespace, in a new mount namespace and in the run's cgroups: builds the
         |     jail, starts the user process, and exits as soon as it ends; the kernel then SIGKILLs every
         |     process left in the namespace. Killed by the kernel when the launcher dies.)
         +- user process  (chroot into the jail, unprivileged uid, rlimits, no_new_privs; exec'd as
                           stage "run": installs the audit hook and runs /sandbox/main.py)

Each process that sets a death signal checks afterwards that its parent still lives: the parent may have
died before the signal was armed.

Weak mode (opt-in, trusted models only, for hosts without namespaces): the launcher's child is the user
process itself, without namespaces, jail or uid change; the rlimits, the run's cgroups when the host has
them, and the audit hook apply.
"""

import json
import os
import resource
import select
import shutil
import signal
import sys
import time
import types

MEMORY_EXIT_CODE = 119  # the user code raised MemoryError (the address-space limit was hit)
SETUP_FAILED_EXIT_CODE = 125
NAMESPACE_ERROR = "cannot create Linux namespaces"  # the parent may fall back to weak mode on this one
CGROUP_REMOVE_S = 2.0  # how long remove_run waits for the last processes of a run to leave its cgroups
# Not /tmp: the interpreter, site-packages or this file may live under /tmp on the host (a checkout or venv
# there), and their read-only mounts would then show up in the user's working directory.
JAIL_WORKDIR = "/sandbox"
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
# Read-only system paths in the jail (besides the interpreter, site-packages and this file).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache")

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 0x20, 0x400, 0x800, 0x1000
MS_REC, MS_PRIVATE, MS_RELATIME = 0x4000, 0x40000, 0x200000
ST_RELATIME = 0x1000
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38


# ----------------------------------------------------------------------------- stage "setup"


def _libc_call(name, *args):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def _set_death_signal(signum):
    """The kernel sends us `signum` when our parent dies. The caller must then check that it has not died already."""
    _libc_call("prctl", PR_SET_PDEATHSIG, signum, 0, 0, 0)


def _mount(source, target, fstype, flags, data=None):
    encode = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    _libc_call("mount", encode(source), encode(target), encode(fstype), flags, encode(data))


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _enter_namespaces():
    """The launcher: new pid (for its children), network, ipc and uts namespaces, in a user namespace when not root."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    if uid != 0:
        flags |= CLONE_NEWUSER  # an unprivileged user may create the other namespaces only inside one
    _libc_call("unshare", flags)
    if uid != 0:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _enter_mount_namespace():
    """Init: the jail's mounts live in init's own mount namespace, so they die with the run, and the launcher keeps
    the host's view of the jail directory (it removes that directory if the trainer dies)."""
    _libc_call("unshare", CLONE_NEWNS)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted below may reach the host


def _bind_read_only(path, root):
    """Expose host `path` at the same place inside the jail `root`, read-only."""
    target = root + path
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if os.path.islink(path):  # e.g. /lib -> usr/lib on merged-/usr systems
        os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        open(target, "a").close()
    _mount(path, target, None, MS_BIND | MS_REC)
    # Keep the flags the host mount already has: a user namespace may not clear them.
    host_flags = os.statvfs(path).f_flag
    kept = host_flags & (MS_NOEXEC | MS_NOATIME | MS_NODIRATIME)
    if host_flags & ST_RELATIME:
        kept |= MS_RELATIME
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | kept)


def _build_jail(cfg):
    """Mount a size-limited tmpfs over the host temp dir and expose only what Python needs."""
    root, limits = cfg["jail_dir"], cfg["limits"]
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={limits['disk_bytes']},nr_inodes=4096,mode=755")
    covered = []
    for path in sorted(set(SYSTEM_PATHS + tuple(cfg["expose"])), key=len):
        if os.path.lexists(path) and not any(path.startswith(c + "/") for c in covered):
            _bind_read_only(path, root)
            covered.append(path)
    os.mkdir(root + "/dev", 0o755)
    for device in DEVICES:
        open(root + device, "a").close()
        _mount(device, root + device, None, MS_BIND)
    os.mkdir(root + "/dev/shm")
    os.chmod(root + "/dev/shm", 0o1777)  # POSIX semaphores (multiprocessing locks), on the jail's tmpfs
    workdir = root + JAIL_WORKDIR
    os.makedirs(workdir, exist_ok=True)
    os.chmod(workdir, 0o700)
    if cfg["uid"] is not None:
        os.chown(workdir, cfg["uid"], cfg["uid"])
    return workdir


def _exit_code(wait_status):
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def _set_limits(limits, limit_processes):
    cpu = limits["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU at cpu s, SIGKILL 1 s later
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limit_processes:  # only where the count is private to this run (see _enter_namespaces)
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"],) * 2)


def _exec_user_process(cfg, workdir):
    # No death signal here: in namespace mode the user process dies with init's pid namespace; in weak mode it is
    # the launcher's child, whose death signal survives the exec (its uid does not change).
    namespaces = cfg["mode"] == "namespaces"
    if namespaces:
        os.chroot(cfg["jail_dir"])
        workdir = JAIL_WORKDIR
    os.chdir(workdir)
    uid = cfg["uid"]
    if uid is not None:  # root: become an unprivileged user that owns nothing on the host
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _set_limits(cfg["limits"], limit_processes=namespaces)
    _libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "USER": "sandbox",
        "LANG": "C.UTF-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    run_cfg = json.dumps({"workdir": workdir, "site_dirs": cfg["site_dirs"], "audit_hook": cfg["audit_hook"]})
    os.set_inheritable(cfg["status_fd"], False)  # the user code must not be able to fake a setup error
    python = cfg["python"]
    os.execve(python, [python, "-I", "-S", "-X", "utf8", cfg["child_script"], "run", run_cfg], env)


def _report_and_exit(status_fd, message):
    os.write(status_fd, message.encode()[:4000])
    os._exit(SETUP_FAILED_EXIT_CODE)


def _run_init(cfg, code):
    """Pid 1 of the new pid namespace: build the jail, run the user process, exit with its status."""
    try:
        _enter_mount_namespace()
    except OSError as e:
        _report_and_exit(cfg["status_fd"], f"{NAMESPACE_ERROR}: {e}")
    try:
        workdir = _build_jail(cfg)
        with open(os.path.join(workdir, "main.py"), "wb") as f:
            f.write(code)
        os.chmod(os.path.join(workdir, "main.py"), 0o644)
    except OSError as e:
        _report_and_exit(cfg["status_fd"], f"cannot build the sandbox filesystem: {e}")
    user_pid = os.fork()
    if user_pid == 0:
        try:
            _exec_user_process(cfg, workdir)
        except BaseException as e:
            _report_and_exit(cfg["status_fd"], f"cannot start the sandboxed process: {e!r}")
    os.close(cfg["status_fd"])
    while True:  # as pid 1, also reap orphans re-parented to us
        pid, wait_status = os.waitpid(-1, 0)
        if pid == user_pid:
            os._exit(_exit_code(wait_status))


def _start_run(cfg, code, lifeline):
    """The launcher's child (init in namespace mode, the user process in weak mode). Never returns."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the launcher's stop() would kill our process group
        _set_death_signal(signal.SIGKILL)
        if select.select([lifeline], [], [], 0)[0]:  # end of file: the launcher died before the signal was armed
            os._exit(SETUP_FAILED_EXIT_CODE)
        try:
            for procs_file in cfg["cgroup_procs"]:  # everything the run starts or writes from here on counts
                _write(procs_file, "0")
        except OSError as e:
            _report_and_exit(cfg["status_fd"], f"cannot join the run's cgroup: {e}")
        _write("/proc/self/oom_score_adj", "1000")  # a node-wide OOM kills the run before the trainer
        if cfg["mode"] == "namespaces":
            _run_init(cfg, code)
        else:
            _exec_user_process(cfg, cfg["jail_dir"])
    except BaseException as e:
        _report_and_exit(cfg["status_fd"], f"cannot start the sandboxed process: {e!r}")
    finally:
        os._exit(SETUP_FAILED_EXIT_CODE)


def setup(cfg):
    """The launcher: enter the namespaces, start one child (init, or the user process in weak mode), wait for it."""
    status_fd, parent_pid = cfg["status_fd"], cfg["parent_pid"]
    with open(os.path.join(cfg["jail_dir"], "main.py"), "rb") as f:
        code = f.read()
    child = None

    def stop(signum, frame):  # the trainer stops the run, or it died (our death signal)
        if child is None:
            sys.exit(SETUP_FAILED_EXIT_CODE)
        os.kill(child, signal.SIGKILL)

    signal.signal(signal.SIGTERM, stop)
    try:
        _set_death_signal(signal.SIGTERM)
        if os.getppid() != parent_pid:
            sys.exit(SETUP_FAILED_EXIT_CODE)  # the trainer died before the signal was armed
        if cfg["mode"] == "namespaces":
            try:
                _enter_namespaces()
            except OSError as e:
                _report_and_exit(status_fd, f"{NAMESPACE_ERROR}: {e}")
        lifeline, lifeline_keep = os.pipe()  # our child reads end of file on `lifeline` once we are gone
        child = os.fork()
        if child == 0:
            os.close(lifeline_keep)
            _start_run(cfg, code, lifeline)
        os.close(lifeline)
        os.close(status_fd)
        os.waitid(os.P_PID, child, os.WEXITED | os.WNOWAIT)  # a zombie keeps its pid: stop() stays safe
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.getppid() != parent_pid:  # the trainer died: nobody else will remove what the run leaves
            remove_run(cfg["jail_dir"], cfg["cgroup_dirs"])
    # In namespace mode every process of the run is gone once init has exited (the kernel kills the namespace).
    sys.exit(_exit_code(os.waitpid(child, 0)[1]))


# ----------------------------------------------------------------------------- clean-up (also used by sandbox.py)


def kill_cgroup_members(paths):
    """SIGKILL every process in the cgroups `paths`: the run's, even those that left its session (weak mode)."""
    for path in paths:
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(pid) for pid in f.read().split()]
        except FileNotFoundError:
            continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def remove_run(jail_dir, cgroup_dirs):
    """Remove what a run leaves on the host: the processes left in its cgroups, the cgroups and the jail directory.
    Returns the cgroups that could not be removed within CGROUP_REMOVE_S."""
    left = list(cgroup_dirs)
    deadline = time.monotonic() + CGROUP_REMOVE_S
    while left and time.monotonic() < deadline:
        kill_cgroup_members(left)
        for path in list(left):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:  # EBUSY while its last processes are still exiting
                continue
            left.remove(path)
        if left:
            time.sleep(0.01)
    shutil.rmtree(jail_dir, ignore_errors=True)
    return left


# ----------------------------------------------------------------------------- stage "run"

# Defense in depth inside the interpreter. CPython audit hooks are not a security boundary (code can
# get around them, e.g. through _imp or crafted bytecode); in namespace mode the kernel (namespaces, jail,
# uid, rlimits, cgroups) is. The hook turns the obvious attempts into clear errors. In weak mode it is the
# only file/network/process barrier, which is why weak mode is for trusted models only.
PROCESS_EVENTS = {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen"}
# ctypes may be imported (sympy needs it) but not used to load libraries, resolve or call native
# functions, or read raw memory. `import ctypes` itself opens the main program (dlopen(None)).
CTYPES_EVENTS = {"ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function", "ctypes.cdata"}
CTYPES_EVENTS |= {"ctypes.string_at", "ctypes.wstring_at"}
BLOCKED_EVENTS = PROCESS_EVENTS | CTYPES_EVENTS | {"os.symlink", "os.link", "code.__new__"}
BLOCKED_EVENTS |= {"cpython.PyInterpreterState_New"}
BLOCKED_EVENT_PREFIXES = ("socket.", "urllib.")
BLOCKED_MODULES = {
    "_cffi_backend",
    "_posixsubprocess",  # imported and disarmed before the hook is installed
    "_xxsubinterpreters",
    "_testcapi",
    "_testinternalcapi",
    "_testbuffer",
    "_ctypes_test",
}
READ_EVENTS = {"os.listdir": 0, "os.scandir": 0}
WRITE_EVENTS = {  # event -> positions of the path arguments
    "os.mkdir": (0,),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.rename": (0, 1),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _inside(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


class AuditPolicy:
    def __init__(self, workdir, read_roots):
        self.write_roots = (os.path.realpath(workdir), "/dev/null")
        self.read_roots = self.write_roots + tuple(os.path.realpath(p) for p in read_roots)

    def _check_path(self, path, write):
        if isinstance(path, int):
            return  # an already open descriptor grants nothing new
        real = os.path.realpath(os.fsdecode(path if path is not None else "."))
        if not _inside(real, self.write_roots if write else self.read_roots):
            action = "writing" if write else "reading"
            raise PermissionError(f"sandbox: {action} {real!r} is not allowed (only the working directory)")
        return real

    def __call__(self, event, args):
        if event == "open":
            path, _, flags = args
            real = self._check_path(path, write=bool(flags & WRITE_FLAGS))
            if real is not None and os.path.isdir(real) and args[1] is None:
                # no directory descriptors: dir_fd-relative paths would escape the path checks above
                raise PermissionError("sandbox: opening directories with os.open is not allowed")
        elif event in READ_EVENTS:
            self._check_path(args[READ_EVENTS[event]], write=False)
        elif event in WRITE_EVENTS:
            for i in WRITE_EVENTS[event]:
                self._check_path(args[i], write=True)
        elif event == "os.chdir":
            self._check_path(args[0], write=True)  # keeps relative paths anchored in the workdir
        elif event in ("os.kill", "os.killpg"):
            if args[0] != os.getpid():
                raise PermissionError("sandbox: sending signals to other processes is not allowed")
        elif event == "ctypes.dlopen":
            if args[0] is not None:
                raise PermissionError(f"sandbox: loading native library {args[0]!r} is not allowed")
        elif event == "import":
            if args[0].rpartition(".")[2] in BLOCKED_MODULES:  # also catches "x._ctypes_test" aliases
                raise ImportError(f"sandbox: module {args[0]!r} is not available")
        elif event in BLOCKED_EVENTS or event.startswith(BLOCKED_EVENT_PREFIXES):
            what = "starting processes" if event in PROCESS_EVENTS else event
            raise PermissionError(f"sandbox: {what} is not allowed")


def _disarm_posixsubprocess():
    import _posixsubprocess

    def fork_exec(*args, **kwargs):
        raise PermissionError("sandbox: starting processes is not allowed")

    _posixsubprocess.fork_exec = fork_exec


def _print_user_traceback(error):
    """Print the traceback as if main.py had run on its own: without this file's frames."""
    import traceback

    report = traceback.TracebackException.from_exception(error)
    pending = [report]
    while pending:
        part = pending.pop()
        part.stack = traceback.StackSummary.from_list([f for f in part.stack if f.filename != __file__])
        pending += [p for p in (part.__cause__, part.__context__) if p is not None]
    sys.stderr.write("".join(report.format()))


def run(cfg):
    import traceback  # noqa: F401  (imported before the hook and before memory runs out)

    sys.dont_write_bytecode = True
    sys.path.extend(cfg["site_dirs"])
    with open("main.py", encoding="utf-8", errors="replace") as f:
        source = f.read()
    if cfg["audit_hook"]:  # off only in tests that attack the kernel layer alone
        _disarm_posixsubprocess()
        sys.addaudithook(AuditPolicy(cfg["workdir"], read_roots=list(sys.path) + list(DEVICES)))
    main = types.ModuleType("__main__")
    main.__file__ = "main.py"
    sys.modules["__main__"] = main
    sys.argv = ["main.py"]
    try:
        exec(compile(source, "main.py", "exec"), main.__dict__)
    except SystemExit:
        raise
    except MemoryError as e:
        _print_user_traceback(e)
        sys.exit(MEMORY_EXIT_CODE)
    except BaseException as e:
        _print_user_traceback(e)
        sys.exit(1)


if __name__ == "__main__":
    stage, config = sys.argv[1], json.loads(sys.argv[2])
    setup(config) if stage == "setup" else run(config)

"""Per-run cgroups of the local sandbox (agents/sandbox.py): they bound a whole run, whatever the
number of its processes: memory (resident and the jail's tmpfs, both charged to the writer's cgroup), processes and
threads, a CPU quota, and they count the run's CPU time and OOM kills.

cgroup v2 is used when the trainer's cgroup offers memory, pids and cpu; else cgroup v1 (one hierarchy per controller,
as on hosts that still mount v2 only for systemd). A run's cgroup is created below the trainer's own cgroup; on v2 a
cgroup that holds processes cannot hand controllers down, so there the parent of the trainer's cgroup is used when
it already does (a delegated sub-tree whose leaf holds the trainer). The controllers of existing cgroups are never
changed. `find_cgroups` proves a place by creating a probe cgroup in it.

Removing a run's cgroups (and killing what is left in them) is agents/sandbox_child.py's
`remove_run`: the launcher needs it too, when the trainer dies.
"""

import dataclasses
import os

V2_CONTROLLERS = ("memory", "pids", "cpu")
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
CPU_PERIOD_US = 100_000


class CgroupsUnavailableError(OSError):
    """No cgroup of this host can hold the sandbox's run cgroups (the message says why)."""


@dataclasses.dataclass(frozen=True)
class CgroupUsage:
    cpu_time_s: float  # all processes of the run, alive or not
    oom_kills: int  # processes killed for the run's memory limit
    process_limit_hits: int  # forks refused by the run's process limit


def _read_key(path, key):
    """The integer after `key` in a flat-keyed cgroup file such as memory.events ("oom_kill 1")."""
    with open(path) as f:
        for line in f:
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


def _write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


class RunCgroup:
    """One run's cgroup: a directory per controller (on v2 the same one for all)."""

    def __init__(self, version, dirs):
        self.version = version
        self.dirs = dirs  # controller -> directory

    @property
    def paths(self):
        return sorted(set(self.dirs.values()))

    def create(self, memory_bytes, processes, cpus):
        for path in self.paths:
            os.mkdir(path, 0o755)
        quota_us = max(1000, int(cpus * CPU_PERIOD_US))
        if self.version == 2:
            limits = [
                ("memory", "memory.max", memory_bytes),
                ("memory", "memory.swap.max", 0),  # swapping out would let the run hold more than its limit
                ("memory", "memory.oom.group", 1),  # an OOM kills the whole run, not one of its processes
                ("pids", "pids.max", processes),
                ("cpu", "cpu.max", f"{quota_us} {CPU_PERIOD_US}"),
            ]
        else:
            limits = [
                ("memory", "memory.limit_in_bytes", memory_bytes),
                ("memory", "memory.memsw.limit_in_bytes", memory_bytes),  # memory + swap (set after the first)
                ("pids", "pids.max", processes),
                ("cpu", "cpu.cfs_period_us", CPU_PERIOD_US),
                ("cpu", "cpu.cfs_quota_us", quota_us),
            ]
        for controller, name, value in limits:
            path = os.path.join(self.dirs[controller], name)
            if name.startswith("memory.swap") or name.startswith("memory.memsw"):
                if not os.path.exists(path):  # the kernel accounts no swap: nothing to bound
                    continue
            _write(path, value)

    @property
    def procs_files(self):
        """The files a process writes "0" to, to move itself into the run."""
        return [os.path.join(path, "cgroup.procs") for path in self.paths]

    def cpu_time_s(self):
        if self.version == 2:
            return _read_key(os.path.join(self.dirs["cpu"], "cpu.stat"), "usage_usec") / 1e6
        with open(os.path.join(self.dirs["cpuacct"], "cpuacct.usage")) as f:
            return int(f.read()) / 1e9

    def oom_kills(self):
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _read_key(os.path.join(self.dirs["memory"], name), "oom_kill")

    def usage(self):
        hits = _read_key(os.path.join(self.dirs["pids"], "pids.events"), "max")
        return CgroupUsage(round(self.cpu_time_s(), 3), self.oom_kills(), hits)


class CgroupParents:
    """Where run cgroups go: the parent directory per controller."""

    def __init__(self, version, parents):
        self.version = version
        self.parents = parents  # controller -> directory

    def run(self, name):
        return RunCgroup(self.version, {c: os.path.join(p, name) for c, p in self.parents.items()})

    def names(self, prefix):
        """The names of the cgroups under the parents that start with `prefix` (runs, maybe of dead trainers)."""
        return {n for p in set(self.parents.values()) for n in os.listdir(p) if n.startswith(prefix)}

    def describe(self):
        return f"cgroup v{self.version} below {', '.join(sorted(set(self.parents.values())))}"


def _mounts():
    """(fstype, mount root, mount point, super options) of each cgroup file system of this mount namespace."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, tail = line.partition(" - ")
            fields, tail = fields.split(), tail.split()
            if tail[0] in ("cgroup", "cgroup2"):
                mounts.append((tail[0], fields[3], fields[4], set(tail[2].split(","))))
    return mounts


def _own_paths():
    """controller (or "" for v2) -> this process's cgroup path."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(","):
                paths[controller] = path
    return paths


def _directory(mount_root, mount_point, path):
    if os.path.relpath(path, mount_root).startswith(".."):
        return None  # our cgroup is outside what is mounted here
    return os.path.normpath(os.path.join(mount_point, os.path.relpath(path, mount_root)))


def _v2_parents(mounts, own):
    mount = next((m for m in mounts if m[0] == "cgroup2"), None)
    if mount is None or "" not in own:
        return None, "no cgroup v2 mount"
    own_dir = _directory(mount[1], mount[2], own[""])
    if own_dir is None:
        return None, "the trainer's cgroup v2 is not mounted"
    with open(os.path.join(own_dir, "cgroup.controllers")) as f:
        offered = set(f.read().split())
    if not offered.issuperset(V2_CONTROLLERS):
        return None, f"cgroup v2 offers {sorted(offered) or 'no controllers'} to {own_dir}, not {list(V2_CONTROLLERS)}"
    candidates = [own_dir] + ([os.path.dirname(own_dir)] if own_dir != mount[2] else [])
    for candidate in candidates:
        with open(os.path.join(candidate, "cgroup.subtree_control")) as f:
            if set(f.read().split()).issuperset(V2_CONTROLLERS):
                return CgroupParents(2, dict.fromkeys(V2_CONTROLLERS, candidate)), ""
    return None, (
        f"cgroup v2 is not delegated: neither {' nor '.join(candidates)} enables {' '.join(V2_CONTROLLERS)} in its "
        "cgroup.subtree_control (a cgroup that holds processes cannot); run the trainer in a leaf of a delegated "
        "sub-tree (e.g. systemd Delegate=yes) whose parent enables them"
    )


def _v1_parents(mounts, own):
    parents = {}
    for controller in V1_CONTROLLERS:
        mount = next((m for m in mounts if m[0] == "cgroup" and controller in m[3]), None)
        if mount is None or controller not in own:
            return None, f"no cgroup v1 hierarchy for {controller}"
        parents[controller] = _directory(mount[1], mount[2], own[controller])
        if parents[controller] is None:
            return None, f"the trainer's cgroup v1 {controller} is not mounted"
    return CgroupParents(1, parents), ""


def find_cgroups(probe_name):
    """The parents for run cgroups on this host, proven by creating and removing a probe cgroup `probe_name`.
    Raises CgroupsUnavailableError saying why there are none."""
    try:
        mounts, own = _mounts(), _own_paths()
        parents, why_not_v2 = _v2_parents(mounts, own)
        if parents is None:
            parents, why_not_v1 = _v1_parents(mounts, own)
            if parents is None:
                raise CgroupsUnavailableError(f"{why_not_v2}; {why_not_v1}")
        probe = parents.run(probe_name)
        try:
            probe.create(memory_bytes=2**30, processes=8, cpus=1)
            probe.usage()
        finally:
            for path in probe.paths:
                if os.path.isdir(path):
                    os.rmdir(path)
    except CgroupsUnavailableError:
        raise
    except OSError as e:
        raise CgroupsUnavailableError(f"cannot create cgroups ({e})") from e
    return parents

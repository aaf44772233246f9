"""Where the local sandbox puts its run cgroups and what it writes there (agents/sandbox_cgroup.py),
on a fake cgroup file system: the CI host has cgroup v1, so v2 is checked here (the real thing runs in
tests/test_sandbox_kernel.py)."""

import os

import pytest

from verl_recipes.agents import sandbox_cgroup
from verl_recipes.agents.sandbox_cgroup import CgroupsUnavailableError, find_cgroups


def _v2_host(root, own_subtree="", parent_subtree="", offered="cpuset cpu io memory pids"):
    """A cgroup2 mount at root/ with the trainer in /job/trainer."""
    own = root / "job" / "trainer"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text(offered + "\n")
    (own / "cgroup.subtree_control").write_text(own_subtree + "\n")
    (own.parent / "cgroup.subtree_control").write_text(parent_subtree + "\n")
    return own


@pytest.fixture
def fake_host(tmp_path, monkeypatch):
    """A cgroup2 mount at tmp_path; the probe cgroup is only a directory (no kernel files appear in it)."""
    monkeypatch.setattr(sandbox_cgroup, "_mounts", lambda: [("cgroup2", "/", str(tmp_path), {"rw"})])
    monkeypatch.setattr(sandbox_cgroup, "_own_paths", lambda: {"": "/job/trainer"})
    monkeypatch.setattr(sandbox_cgroup.RunCgroup, "create", lambda self, **limits: [*map(os.mkdir, self.paths)])
    monkeypatch.setattr(sandbox_cgroup.RunCgroup, "usage", lambda self: None)
    return tmp_path


def test_v2_runs_go_below_the_delegated_parent_of_the_trainers_leaf(fake_host):
    _v2_host(fake_host, parent_subtree="cpu memory pids")
    parents = find_cgroups("verl-sandbox-probe")
    assert (parents.version, parents.describe()) == (2, f"cgroup v2 below {fake_host / 'job'}")
    assert parents.run("verl-sandbox-1.2-x").procs_files == [str(fake_host / "job/verl-sandbox-1.2-x/cgroup.procs")]
    assert not (fake_host / "job" / "verl-sandbox-probe").exists()


def test_v2_limits_bound_the_whole_run(tmp_path):
    run = sandbox_cgroup.RunCgroup(2, dict.fromkeys(sandbox_cgroup.V2_CONTROLLERS, str(tmp_path / "run")))
    run.create(memory_bytes=200 * 2**20, processes=16, cpus=1.5)
    files = {f.name: f.read_text() for f in (tmp_path / "run").iterdir()}
    assert files == {
        "memory.max": str(200 * 2**20),
        "memory.oom.group": "1",
        "pids.max": "16",
        "cpu.max": "150000 100000",
    }  # memory.swap.max only where the kernel accounts swap (where the file exists)


def test_v2_own_cgroup_is_used_when_it_hands_the_controllers_down(fake_host):
    own = _v2_host(fake_host, own_subtree="memory pids cpu")
    assert find_cgroups("verl-sandbox-probe").describe() == f"cgroup v2 below {own}"


@pytest.mark.parametrize(
    "host, reason",
    [
        ({}, "cgroup v2 is not delegated: neither {own} nor {parent} enables memory pids cpu"),
        ({"parent_subtree": "memory pids"}, "cgroup v2 is not delegated"),
        ({"offered": ""}, "cgroup v2 offers no controllers to {own}"),
        # a lent GPU machine: the job in a leaf whose parent hands down memory only
        ({"offered": "memory", "parent_subtree": "memory"}, r"cgroup v2 offers \['memory'\] to {own}, not"),
    ],
)
def test_v2_without_delegation_says_why(fake_host, host, reason):
    own = _v2_host(fake_host, **host)
    with pytest.raises(CgroupsUnavailableError, match=reason.format(own=own, parent=own.parent)):
        find_cgroups("verl-sandbox-probe")


def test_v2_usage_reads_cpu_oom_kills_and_refused_forks(tmp_path):
    (tmp_path / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    (tmp_path / "pids.events").write_text("max 7\n")
    run = sandbox_cgroup.RunCgroup(2, dict.fromkeys(sandbox_cgroup.V2_CONTROLLERS, str(tmp_path)))
    assert run.usage() == sandbox_cgroup.CgroupUsage(cpu_time_s=1.5, oom_kills=1, process_limit_hits=7)

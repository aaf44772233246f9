"""verl_recipes.perf.collect_nsys on a fake Ray/verl profiling tree, and verl_recipes.perf.nsys_summary on a
synthetic SQLite export built with the table and column names of `nsys export --type sqlite`."""

import sqlite3
from pathlib import Path

import pytest

from verl_recipes.perf import collect_nsys, nsys_summary

MS = 1_000_000  # ns


def write(path: Path, text: str = "nsys") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def run_tree(tmp_path):
    """Node A still holds Ray's session dir; node B's reports were relocated to save_path and its logs copied."""
    session = tmp_path / "run" / "nodeA" / "session_2026-11-21_10-00-00_123"
    nsight = session / "logs" / "nsight"
    write(nsight / "worker_process_111.1.nsys-rep", "rank3-range1")
    write(nsight / "worker_process_111.2.nsys-rep", "rank3-range2")
    write(nsight / "worker_process_900.nsys-rep", "controller")
    write(nsight / "worker_process_112.3.qdstrm", "unfinished")
    finish_line = "[Profiler][finish_hook] rank 3: profiling finished; cmd=None, run_on_this_rank=True, save_path='p'"
    write(session / "logs" / "worker-0a1b-01000000-111.out", f":job_id:01000000\n:actor_name:WorkerDict\nstep done\n{finish_line}\n")
    write(session / "logs" / "worker-0a1c-01000000-900.err", ":job_id:01000000\n:actor_name:TaskRunnerV1\n")
    save_path = tmp_path / "run" / "nodeB" / "profile"
    write(save_path / "actor_rollout_ref_node-b_worker_process_222.1.nsys-rep", "rank5")
    write(save_path / "node-b_worker_process_333.2.nsys-rep", "no role")
    write(save_path / "my_custom_name.nsys-rep", "custom -o")
    node_b_logs = tmp_path / "nodeB-logs"
    write(node_b_logs / "worker-0b00-01000000-222.out", "[Profiler][finish_hook] rank 5: profiling finished; cmd=None\n")
    return tmp_path / "run", node_b_logs


def test_collect_renames_by_rank_role_step(run_tree, tmp_path, capsys):
    root, node_b_logs = run_tree
    dest = tmp_path / "collected"
    roots = [str(root / "nodeA"), str(root / "nodeB" / "profile")]  # Ray's session dir and save_path
    code = collect_nsys.main([*roots, str(dest), "--ray-logs", str(node_b_logs), "--profile-steps", "2,4"])
    out = capsys.readouterr().out
    assert code == 0
    names = {p.name: p.read_text() for p in dest.iterdir() if p.suffix == ".nsys-rep"}
    assert names == {
        "rank-3_role-unknown_step-2_host-unknown_pid-111_range-1.nsys-rep": "rank3-range1",
        "rank-3_role-unknown_step-4_host-unknown_pid-111_range-2.nsys-rep": "rank3-range2",
        "rank-unknown_role-controller_step-all_host-unknown_pid-900_range-all.nsys-rep": "controller",
        "rank-5_role-actor_rollout_ref_step-2_host-node-b_pid-222_range-1.nsys-rep": "rank5",
        "rank-unknown_role-unknown_step-4_host-node-b_pid-333_range-2.nsys-rep": "no role",
        "unparsed_my_custom_name.nsys-rep": "custom -o",
    }
    assert "worker_process_112.3.qdstrm: unfinished nsys output" in out
    assert "my_custom_name.nsys-rep: name is neither" in out
    manifest = [line.split("\t") for line in (dest / "manifest.tsv").read_text().splitlines()]
    assert manifest[0] == collect_nsys.MANIFEST_HEADER
    rank5 = next(row for row in manifest if row[0].startswith("rank-5"))
    assert rank5[2:9] == ["5", "worker log", "actor_rollout_ref", "file name", "2", "--profile-steps", "node-b"]


def test_collect_without_steps_keeps_steps_unknown(run_tree, tmp_path, capsys):
    root, _ = run_tree
    dest = tmp_path / "collected"
    assert collect_nsys.main([str(root), str(dest)]) == 0
    names = {p.name for p in dest.iterdir()}
    assert "rank-3_role-unknown_step-unknown_host-unknown_pid-111_range-1.nsys-rep" in names
    # without --ray-logs nothing maps node B's pid 222 to a rank
    assert "rank-unknown_role-actor_rollout_ref_step-unknown_host-node-b_pid-222_range-1.nsys-rep" in names


def test_range_beyond_the_profiled_steps_stays_unknown(run_tree, tmp_path, capsys):
    root, _ = run_tree
    dest = tmp_path / "collected"
    assert collect_nsys.main([str(root), str(dest), "--profile-steps", "7"]) == 0
    out = capsys.readouterr().out
    assert "rank-3_role-unknown_step-unknown_host-unknown_pid-111_range-2.nsys-rep" in {p.name for p in dest.iterdir()}
    assert "capture range 2, --profile-steps gives 1; step left unknown" in out


def test_pid_with_different_ranks_on_two_nodes_stays_unknown(tmp_path, capsys):
    write(tmp_path / "save" / "actor_host_worker_process_50.1.nsys-rep")
    logs_a = tmp_path / "logs-a"
    logs_b = tmp_path / "logs-b"
    write(logs_a / "worker-aa-01000000-50.out", "[Profiler][finish_hook] rank 0: profiling finished\n")
    write(logs_b / "worker-bb-01000000-50.out", "[Profiler][finish_hook] rank 8: profiling finished\n")
    dest = tmp_path / "out"
    assert collect_nsys.main([str(tmp_path / "save"), str(dest), "--ray-logs", str(logs_a), "--ray-logs", str(logs_b)]) == 0
    assert [p.name for p in dest.glob("*.nsys-rep")] == ["rank-unknown_role-actor_step-unknown_host-host_pid-50_range-1.nsys-rep"]
    assert "pid 50 has ranks ['0', '8']" in capsys.readouterr().out


def test_step_labels_for_continuous_profiling():
    assert collect_nsys.step_labels([5, 1, 2], continuous=False) == ["1", "2", "5"]
    assert collect_nsys.step_labels([5, 1, 2, 3], continuous=True) == ["1-3", "5"]


@pytest.mark.parametrize(
    "make_args, expected",
    [
        (lambda t: [str(t / "nothing"), str(t / "d")], "no such directory"),
        (lambda t: [str(write(t / "empty" / "x.txt").parent), str(t / "d")], "no *.nsys-rep file below"),
        (lambda t: [str(t), str(write(t / "full" / "x").parent)], "destination is not empty"),
        (lambda t: [str(t), str(t / "d"), "--profile-steps", "1,b"], "--profile-steps '1,b'"),
        (lambda t: [str(t), str(t / "d"), "--continuous"], "--continuous needs --profile-steps"),
    ],
)
def test_collect_errors_are_named(tmp_path, capsys, make_args, expected):
    write(tmp_path / "r" / "worker_process_1.1.nsys-rep")
    assert collect_nsys.main(make_args(tmp_path)) == 2
    assert expected in capsys.readouterr().err


# ---------------------------------------------------------------- nsys_summary

SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE NVTX_EVENTS (
    start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER,
    color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER REFERENCES StringIds(id),
    domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
    int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    demangledName INTEGER NOT NULL REFERENCES StringIds(id), shortName INTEGER NOT NULL REFERENCES StringIds(id));
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
    correlationId INTEGER, nameId INTEGER NOT NULL REFERENCES StringIds(id), returnValue INTEGER NOT NULL,
    callchainId INTEGER);
"""
WORKER, OTHER = 4242, 77


def tid(pid: int, thread: int) -> int:
    """nsys's serialized GlobalId: pid in bits 24-47, tid in bits 0-23."""
    return pid * 0x1000000 + thread


def build_export(path: Path, with_runtime: bool = True) -> Path:
    """One worker process: actor_compute_log_prob (registered string) then actor_update with a nested train_batch."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "actor_compute_log_prob"), (2, "gemm"), (3, "cudaLaunchKernel")])
    ranges = [  # start, end, eventType, text, globalTid, textId
        (0, 100 * MS, 59, None, tid(WORKER, 1), 1),
        (200 * MS, 500 * MS, 59, "actor_update", tid(WORKER, 1), None),
        (210 * MS, 490 * MS, 59, "train_batch", tid(WORKER, 1), None),
        (0, 0, 34, "a mark", tid(WORKER, 1), None),  # NvtxMark: not a range
    ]
    db.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES (?, ?, ?, ?, ?, ?)", ranges)
    kernels = [  # launch ms, launching thread, kernel start ms, end ms, pid, correlationId
        (5, 1, 10, 40, WORKER, 1),  # compute_log_prob, stream overlap with the next one
        (6, 1, 30, 60, WORKER, 2),
        (95, 1, 100, 120, WORKER, 3),  # launched inside, runs after the range closed
        (150, 1, 150, 160, WORKER, 4),  # between ranges
        (220, 2, 230, 330, WORKER, 5),  # autograd thread, inside actor_update
        (495, 2, 505, 520, WORKER, 6),  # launched inside, runs after the range closed
        (50, 1, 60, 70, OTHER, 1),  # another process, same correlationId as a worker kernel
    ]
    for launch, thread, start, end, pid, corr in kernels:
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId,"
            " globalPid, demangledName, shortName) VALUES (?, ?, 0, 1, 7, ?, ?, 2, 2)",
            (start * MS, end * MS, corr, tid(pid, 0)),
        )
        if with_runtime:
            db.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId,"
                " returnValue) VALUES (?, ?, 0, ?, ?, 3, 0)",
                (launch * MS, (launch + 1) * MS, tid(pid, thread), corr),
            )
    db.commit()
    db.close()
    return path


def by_name(stages):
    return {stage.name: stage for stage in stages}


def test_summary_attributes_kernels_by_launch_to_top_level_ranges(tmp_path):
    stages = by_name(nsys_summary.summarize(build_export(tmp_path / "w.sqlite")))
    assert list(stages) == ["actor_update", "actor_compute_log_prob", nsys_summary.OUTSIDE, nsys_summary.ALL]
    log_prob = stages["actor_compute_log_prob"]
    assert (log_prob.calls, log_prob.wall_ns) == (1, 100 * MS)
    assert log_prob.kernel_ns == (30 + 30 + 20) * MS
    assert log_prob.busy_ns == (50 + 20) * MS  # 10-60 union, then 100-120
    update = stages["actor_update"]
    assert (update.kernel_ns, update.busy_ns) == (115 * MS, 115 * MS)
    outside = stages[nsys_summary.OUTSIDE]
    assert outside.kernel_ns == (10 + 10) * MS  # the gap kernel and the other process's kernel
    assert stages[nsys_summary.ALL].kernel_ns == (30 + 30 + 20 + 10 + 100 + 15 + 10) * MS


def test_summary_of_a_named_nested_range(tmp_path):
    stages = by_name(nsys_summary.summarize(build_export(tmp_path / "w.sqlite"), ["train_batch"]))
    assert stages["train_batch"].wall_ns == 280 * MS
    assert stages["train_batch"].kernel_ns == 100 * MS  # the launch at 495 is after train_batch closed


def test_summary_without_runtime_table_uses_kernel_start(tmp_path):
    stages = by_name(nsys_summary.summarize(build_export(tmp_path / "w.sqlite", with_runtime=False)))
    assert stages["actor_compute_log_prob"].kernel_ns == 60 * MS  # the 100-120 kernel started after the range
    assert stages["actor_update"].kernel_ns == 100 * MS  # the 505-520 kernel started after it
    assert stages[nsys_summary.OUTSIDE].kernel_ns == (20 + 10 + 15 + 10) * MS


def test_summary_cli_prints_a_table(tmp_path, capsys):
    export = build_export(tmp_path / "w.sqlite")
    assert nsys_summary.main([str(export)]) == 0
    lines = capsys.readouterr().out.splitlines()
    update = next(line.split() for line in lines if line.startswith("actor_update"))
    assert update == ["actor_update", "1", "0.300", "0.115", "0.115", "38.3", "2"]


def test_summary_errors_are_named(tmp_path, capsys, monkeypatch):
    broken = tmp_path / "no_kernels.sqlite"
    with sqlite3.connect(broken) as db:
        db.executescript(
            "CREATE TABLE StringIds (id INTEGER, value TEXT);"
            " CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER);"
        )
    assert nsys_summary.main([str(broken)]) == 2
    assert f"{broken}: no table CUPTI_ACTIVITY_KIND_KERNEL" in capsys.readouterr().err

    garbage = write(tmp_path / "garbage.sqlite", "not a database at all" * 100)
    assert nsys_summary.main([str(garbage)]) == 2
    assert "not an SQLite database" in capsys.readouterr().err

    report = write(tmp_path / "worker_process_1.1.nsys-rep")
    monkeypatch.setenv("PATH", "")
    assert nsys_summary.main([str(report)]) == 2
    assert "nsys is not on PATH; run `nsys export --type sqlite" in capsys.readouterr().err

    assert nsys_summary.main([str(build_export(tmp_path / "w.sqlite")), "--range", "nope"]) == 2
    assert "no NVTX range named nope" in capsys.readouterr().err

"""tests/gpu/harvest.sh on a fake lent machine: what live runs have measured (node records, per-phase memory rows,
verl's metrics and log tail) lands flat in $OUT, named by job, and an empty machine copies nothing and exits 0.
tests/gpu/wait.sh: a waiting call returns when the job it waits on has ended, harvesting as it goes, and hands back
more files than a device call returns as one archive."""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def harvest(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "REPO_COPY": str(tmp_path / "repo"),
           "SIDE_ROOT": str(tmp_path / "side"), "RL_NODE_WORK": str(tmp_path / "work"),
           "RL_RUNS_DIR": str(tmp_path / "runs"), "LOG_TAIL": "11"}
    done = subprocess.run(["bash", str(REPO / "tests/gpu/harvest.sh")], env=env, capture_output=True, text=True,
                          timeout=30)
    return done, out


def test_an_empty_machine_copies_nothing(tmp_path):
    done, out = harvest(tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(out.iterdir()) == []


def test_live_runs_land_flat_and_named(tmp_path):
    (tmp_path / "repo/results/node/history").mkdir(parents=True)
    (tmp_path / "repo/results/node/qwen25-vl-7b-geo3k-dapo.2xh200.json").write_text("{}")
    phases = tmp_path / "work/phase-memory/qwen25-vl-7b-geo3k-dapo-v1"
    phases.mkdir(parents=True)
    (phases / "rank0.4242.jsonl").write_text('{"phase": "old_log_prob"}\n')
    launch = tmp_path / "side/vl7b/runs/qwen25-vl-7b-geo3k-dapo-v1-node/launches/20261128-2101"
    launch.mkdir(parents=True)
    (launch / "metrics.jsonl").write_text('{"step": 1}\n')
    (launch / "verl.log").write_text("start-up...\nstep:1 - timing_s/step:190.4\n")
    done, out = harvest(tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "phases.qwen25-vl-7b-geo3k-dapo-v1.rank0.4242.jsonl", "qwen25-vl-7b-geo3k-dapo.2xh200.json",
        "vl7b.metrics.jsonl", "vl7b.verl.log"]
    assert (out / "vl7b.verl.log").read_text() == "step:190.4\n"  # the last LOG_TAIL bytes


def wait(tmp_path: Path, seconds: int, pid: int, log: Path) -> tuple[subprocess.CompletedProcess, float]:
    import time

    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"), "REPO_COPY": str(tmp_path / "repo"),
           "SIDE_ROOT": str(tmp_path / "side"), "RL_RUNS_DIR": str(tmp_path / "runs"), "POLL_S": "0.2",
           "TAIL_LINES": "1", "JOB_OUT": str(tmp_path / "job_out")}
    (tmp_path / "out").mkdir(exist_ok=True)
    started = time.monotonic()
    done = subprocess.run(["bash", str(REPO / "tests/gpu/wait.sh"), str(seconds), str(pid), str(log)], env=env,
                          capture_output=True, text=True, timeout=60)
    return done, time.monotonic() - started


def test_a_wait_returns_when_its_job_has_ended_and_shows_the_log(tmp_path):
    log = tmp_path / "chain.log"
    log.write_text("s2 start\nModuleNotFoundError: No module named 'datasets'\n")
    job = subprocess.Popen(["sleep", "1"])
    (tmp_path / "side/job/runs/r/launches/1").mkdir(parents=True)
    (tmp_path / "side/job/runs/r/launches/1/metrics.jsonl").write_text('{"step": 1}\n')
    done, took = wait(tmp_path, 50, job.pid, log)
    job.wait()
    assert done.returncode == 0, done.stderr
    assert f"[wait] pid {job.pid} ended after" in done.stdout and took < 20  # not the 50 s asked for
    assert done.stdout.endswith("No module named 'datasets'\n")  # the log's last line
    assert (tmp_path / "out/job.metrics.jsonl").exists()  # harvested on the way


def test_a_wait_on_a_live_job_returns_at_its_seconds(tmp_path):
    job = subprocess.Popen(["sleep", "30"])
    try:
        done, took = wait(tmp_path, 1, job.pid, tmp_path / "absent.log")
    finally:
        job.kill()
        job.wait()
    assert done.returncode == 0 and f"[wait] pid {job.pid} still running after 1 s" in done.stdout and took < 10


def test_the_jobs_own_files_come_back_and_more_than_eight_as_one_archive(tmp_path):
    import tarfile

    job_out = tmp_path / "job_out"
    job_out.mkdir()
    (job_out / "chain.log").write_text("CHAIN DONE\n")
    done, _ = wait(tmp_path, 5, subprocess.Popen(["true"]).pid, job_out / "chain.log")
    assert done.returncode == 0 and sorted(p.name for p in (tmp_path / "out").iterdir()) == ["chain.log"]
    for i in range(9):  # three smokes' records and logs: more than a device call brings back
        (job_out / f"sgl_{i}.log").write_text(f"run {i}\n")
    done, _ = wait(tmp_path, 5, subprocess.Popen(["true"]).pid, job_out / "chain.log")
    assert done.returncode == 0 and "harvest.tgz" in done.stdout
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["harvest.tgz"]
    with tarfile.open(tmp_path / "out/harvest.tgz") as archive:
        assert sorted(Path(n).name for n in archive.getnames() if n != ".") == sorted(
            ["chain.log", *(f"sgl_{i}.log" for i in range(9))])

"""tests/gpu/side_by_side.sh, run against a stub of the kit's run.sh: each job gets its own GPUs, runs folder and
vLLM cache, and the script fails when any job fails or a job is malformed."""

import subprocess
import sys
from pathlib import Path

import pytest

from verl_recipes import gpu_queue

REPO = Path(__file__).resolve().parent.parent
STUB = """#!/usr/bin/env bash
# stub of the kit's run.sh NAME LAYERSET TIMEOUT_S -- command...: records what the job saw, then runs the command
name=$1 layers=$2; shift 4
echo "$name layers=$layers gpus=$CUDA_VISIBLE_DEVICES runs=$RL_RUNS_DIR vllm=$VLLM_CACHE_ROOT deadline=$GPU_DEADLINE" >> "$LOG"
"$@"
"""


def _run(tmp_path: Path, *jobs: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "run.sh").write_text(STUB)
    log = tmp_path / "jobs.log"
    env = {"PATH": "/usr/bin:/bin", "GPU_KIT": str(tmp_path), "STAGGER_S": "0", "LOG": str(log)}
    done = subprocess.run(["bash", str(REPO / "tests/gpu/side_by_side.sh"), "60", *jobs], env=env,
                          capture_output=True, text=True, timeout=60)
    return done, sorted(log.read_text().splitlines()) if log.exists() else []


def test_each_job_gets_its_own_gpus_runs_folder_vllm_cache_and_layer_set(tmp_path):
    done, seen = _run(tmp_path, "0 text true", "1,2 async true", "3 meg@all-tf59 true")
    assert done.returncode == 0, done.stderr
    assert [line.split(" deadline=")[0] for line in seen] == [
        "async layers=all gpus=1,2 runs=/tmp/side/async/runs vllm=/tmp/side/async/vllm",
        "meg layers=all-tf59 gpus=3 runs=/tmp/side/meg/runs vllm=/tmp/side/meg/vllm",
        "text layers=all gpus=0 runs=/tmp/side/text/runs vllm=/tmp/side/text/vllm"]
    assert len({line.split(" deadline=")[1] for line in seen}) == 1  # one deadline for all


def test_one_failed_job_fails_the_whole(tmp_path):
    done, seen = _run(tmp_path, "0 ok true", "1 bad false")
    assert done.returncode == 1 and len(seen) == 2  # the other job still ran


def test_a_job_without_a_command_is_refused_by_name(tmp_path):
    done, seen = _run(tmp_path, "0 lonely")
    assert done.returncode == 2 and "'0 lonely'" in done.stderr and seen == []


ORDER_STUB = """#!/usr/bin/env bash
# stub of the kit's run.sh that records when each job starts and ends
name=$1; shift 4
echo "start $name" >> "$LOG"; "$@"; echo "end $name" >> "$LOG"
"""


@pytest.mark.slow
def test_a_queued_job_starts_when_the_jobs_on_its_gpus_have_ended(tmp_path):
    """"+GPUS NAME command" waits for every earlier job on any of its GPUs; the others start at once."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "run.sh").write_text(ORDER_STUB)
    log = tmp_path / "order.log"
    env = {"PATH": "/usr/bin:/bin", "GPU_KIT": str(tmp_path), "STAGGER_S": "0", "LOG": str(log)}
    done = subprocess.run(["bash", str(REPO / "tests/gpu/side_by_side.sh"), "60", "0 slow sleep 3", "1 quick sleep 1",
                           "+0,1 pair true", "2 other true"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    order = log.read_text().splitlines()
    assert order.index("start pair") > max(order.index("end slow"), order.index("end quick"))
    assert order.index("start other") < order.index("end slow")  # not queued: started beside the first jobs


PYTHON_STUB = """#!/usr/bin/env bash
# stub of python3: records the module a stage runs
echo "$2 $3" >> "$LOG"
"""


def test_learn_tiny_copies_of_one_pair_never_share_a_folder(tmp_path):
    """Two copies of one pair on one machine each build and run in a folder of their own (two copies sharing
    /tmp/learn/<recipe>.<control> died at start-up), and SEED reaches the build and the run (tests/gpu/learn_tiny.sh)."""
    (tmp_path / "python3").write_text('#!/usr/bin/env bash\necho "$*" >> "$LOG"\n')
    (tmp_path / "python3").chmod(0o755)
    log = tmp_path / "calls.log"
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "LOG": str(log), "SEED": "3", "LEARN_WORK": str(tmp_path / "work")}
    copies = [subprocess.Popen(["bash", "tests/gpu/learn_tiny.sh", "stagetest-recipe", "none"], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, text=True) for _ in range(2)]
    assert all(copy.wait(timeout=60) == 0 for copy in copies)
    calls = [line.split() for line in log.read_text().splitlines()]
    builds = [c for c in calls if c[1] == "verl_recipes.learn.build"]
    runs = [c for c in calls if c[1] == "verl_recipes"]
    assert len(builds) == len(runs) == 2
    folders = {c[2] for c in builds}
    assert len(folders) == 2 and all("/stagetest-recipe.none.s3." in f for f in folders)
    assert all(c[c.index("--seed") + 1] == "3" for c in builds + runs)
    assert {c[c.index("--tiny") + 1] for c in runs} == folders


def test_kit_spares_go_on_the_path_where_the_kit_has_them(tmp_path):
    for spare in ("mathruler", "blake3"):
        (tmp_path / "root/layers/Z" / spare).mkdir(parents=True)
    (tmp_path / "extra").mkdir()
    env = {"PATH": "/usr/bin:/bin", "GPU_KIT": str(tmp_path), "EXTRA_SITE": str(tmp_path / "extra"), "PYTHONPATH": "/x"}
    done = subprocess.run(["bash", "-c", "source tests/gpu/kit_spares.sh; echo $PYTHONPATH"], cwd=REPO, env=env,
                          capture_output=True, text=True, check=True)
    z = tmp_path / "root/layers/Z"
    assert done.stdout.strip().split(":") == [str(tmp_path / "extra"), "/x", str(z / "mathruler"), str(z / "blake3")]


def test_kit_spares_compile_each_kits_layers_once(tmp_path):
    """The lent machine writes no bytecode (PYTHONDONTWRITEBYTECODE=1) and the kits carry none: the layers on
    PYTHONPATH are compiled once per install, another kit's too (SGLang's), and nothing else on the path."""
    for kit in ("gpu", "sgl"):
        (tmp_path / kit / "root/layers/R/pkg").mkdir(parents=True)
        (tmp_path / kit / "root/layers/R/pkg/mod.py").write_text("X = 1\n")
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout/own.py").write_text("Y = 2\n")
    path = f"{tmp_path}/checkout:{tmp_path}/gpu/root/layers/R:{tmp_path}/sgl/root/layers/R"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "GPU_KIT": str(tmp_path / "gpu"),
           "EXTRA_SITE": str(tmp_path / "none"), "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}
    source = ["bash", "-c", "source tests/gpu/kit_spares.sh"]
    subprocess.run(source, cwd=REPO, env=env, check=True, timeout=60)
    for kit in ("gpu", "sgl"):
        assert list((tmp_path / kit / "root/layers/R/pkg/__pycache__").glob("mod.*.pyc"))
        assert (tmp_path / kit / "root/layers/.compiled").exists()
    assert not (tmp_path / "checkout/__pycache__").exists()
    (tmp_path / "gpu/root/layers/R/pkg/new.py").write_text("Z = 3\n")  # compiled once: a second source does nothing
    subprocess.run(source, cwd=REPO, env=env, check=True, timeout=60)
    assert not list((tmp_path / "gpu/root/layers/R/pkg/__pycache__").glob("new.*.pyc"))


def test_smoke_tiny_builds_a_missing_tiny_folder_first(tmp_path):
    """tests/gpu/smoke_tiny.sh builds a TINY_DIR that does not exist (the card's tiny family) and reuses one that does."""
    (tmp_path / "python3").write_text(PYTHON_STUB)
    (tmp_path / "python3").chmod(0o755)
    log = tmp_path / "calls.log"
    (tmp_path / "built").mkdir()
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "LOG": str(log), "RL_RUNS_DIR": str(tmp_path)}
    done = subprocess.run(["bash", "tests/gpu/smoke_tiny.sh", "a-recipe:megatron", str(tmp_path / "missing"),
                           "b-recipe", str(tmp_path / "built")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert log.read_text().split("\n")[:3] == [f"verl_recipes.smoke.tiny {tmp_path / 'missing'}",
                                              "verl_recipes smoke", "verl_recipes smoke"]


@pytest.mark.slow
def test_lanes_share_a_gpu_and_queue_on_their_own_lane(tmp_path):
    """"0.a" and "0.b" run side by side on GPU 0; "+0.a" waits for lane a only; CUDA_VISIBLE_DEVICES drops the lane."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "run.sh").write_text(ORDER_STUB.replace('"$@";', '"$@"; echo "gpus $name $CUDA_VISIBLE_DEVICES" >> "$LOG";'))
    log = tmp_path / "order.log"
    env = {"PATH": "/usr/bin:/bin", "GPU_KIT": str(tmp_path), "STAGGER_S": "0", "LOG": str(log)}
    done = subprocess.run(["bash", str(REPO / "tests/gpu/side_by_side.sh"), "60", "0.a slow sleep 3",
                           "0.b quick sleep 1", "+0.b next true", "+0.a,1.a pair true"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    order = log.read_text().splitlines()
    assert order.index("start next") < order.index("end slow")  # lane b does not wait for lane a
    assert order.index("start next") > order.index("end quick")
    assert order.index("start pair") > order.index("end slow")
    assert {"gpus slow 0", "gpus quick 0", "gpus next 0", "gpus pair 0,1"} <= set(order)


def load_reruns():
    import importlib.util

    spec = importlib.util.spec_from_file_location("learn_reruns", REPO / "tests/gpu/learn_reruns.py")
    reruns = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reruns)
    return reruns


def test_learn_reruns_lays_every_seed_s_run_and_control_over_the_lanes():
    """tests/gpu/learn_reruns.py: a run and a control per seed and recipe; a two-GPU variant takes lanes of two GPUs;
    a job behind another on its lane is queued ("+")."""
    reruns = load_reruns()
    planned = reruns.jobs(["r", "r:separate_async"], [1, 2])
    assert [(j[0], j[1], j[2]) for j in planned[:2]] == [("r", 1, "none"), ("r", 1, "shuffled")]
    assert len(planned) == 8 and {j[3] for j in planned if j[0] == "r:separate_async"} == {2}
    laid = [p.line() for p in gpu_queue.lay_out(reruns.queue_jobs(planned, 480), gpus=2, stagger_s=15)]
    lanes = [job.split()[0] for job in laid]
    assert lanes[:2] == ["0", "1"] and all(lane.startswith("+") for lane in lanes[2:])
    pairs = [lane.lstrip("+").split(",") for job, lane in zip(planned, lanes) if job[3] == 2]
    assert all(len(set(pair)) == 2 for pair in pairs)
    assert all("env SEED=" in job and "learn_tiny.sh" in job for job in laid)
    two_lanes = gpu_queue.lay_out(reruns.queue_jobs(planned[:4], 480), gpus=2, stagger_s=15, lanes=2)
    assert [p.lanes for p in two_lanes][:3] == [("0.a",), ("1.a",), ("0.b",)]
    # --jobs: these, in this order (a stale-weights control between two recipes' seeds)
    listed = [job for spec in ("r,1,none", "r,1,stale", "r:separate_async,2,shuffled") for job in reruns.listed(spec)]
    assert listed == [("r", 1, "none", 1), ("r", 1, "stale", 1), ("r:separate_async", 2, "shuffled", 2)]
    assert gpu_queue.lay_out(reruns.queue_jobs(listed, 480), 2, 15)[1].line().endswith("learn_tiny.sh r stale")


def test_learn_reruns_refuses_a_layout_whose_last_job_ends_after_its_seconds(capsys):
    """Nine jobs on four GPUs are three waves: 1400 s killed the last wave's jobs in their last validation."""
    reruns = load_reruns()
    nine = ["r:separate_async,1,none", "r,1,none", "r,2,none", "r:separate_async,2,none", "r,3,none", "r,1,shuffled",
            "r:separate_async,3,none", "r,2,shuffled", "r,3,shuffled"]
    with pytest.raises(SystemExit):
        reruns.main(["1400", "--gpus", "4", "--dry-run", "--jobs", *nine])
    assert "> 1400 s" in capsys.readouterr().err
    assert reruns.main(["1500", "--gpus", "4", "--dry-run", "--jobs", *nine]) == 0


def test_a_long_job_keeps_its_lane_and_the_short_ones_fill_the_others(capsys, monkeypatch):
    """SmolLM2's run takes about two ReTool runs (EXPECTED_S): an equal-length guess queued ReTool behind it and
    past the deadline (2026-11-27, 20:58 UTC); by expected seconds the others pass it by."""
    reruns = load_reruns()
    monkeypatch.setenv("STAGGER_S", "20")
    smol = reruns.EXPECTED_S["smollm2-135m-grpo"]
    specs = ["smollm2-135m-grpo,1,none", "smollm2-135m-grpo,1,shuffled", *(
        f"retool-qwen25-7b,{seed},{control}" for seed in (1, 2) for control in ("none", "shuffled"))]
    laid = gpu_queue.lay_out(reruns.queue_jobs([j for s in specs for j in reruns.listed(s)], 480), 4, 20)
    assert [p.lanes for p in laid if p.job.name.startswith("smollm2")] == [("0",), ("1",)]
    assert {p.lanes for p in laid if p.queued} == {("2",), ("3",)}
    assert gpu_queue.finish_s(laid) == max(20 + smol, 60 + 2 * 480)
    assert reruns.main([str(gpu_queue.finish_s(laid)), "--gpus", "4", "--dry-run", "--jobs", *specs]) == 0
    with pytest.raises(SystemExit):
        reruns.main([str(gpu_queue.finish_s(laid) - 1), "--gpus", "4", "--dry-run", "--jobs", *specs])

"""Resumption is decided by the launcher (verl_recipes/resume.py), said before verl starts, and never touches another
run's folder. verl itself is replaced by a fake trainer that writes what verl writes: checkpoints under
trainer.default_local_dir (global_step_N/ and the tracker file) and a metrics line."""

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from verl.utils.import_utils import load_class_from_fqn

from verl_recipes import catalog, launch, resume
from verl_recipes.catalog import RecipeError
from verl_recipes.compose import compose
from verl_recipes.smoke import run as smoke

QWEN = "qwen25-7b-grpo"
LR = "actor_rollout_ref.actor.optim.lr"


@pytest.fixture
def workspace(run_env, monkeypatch):
    """Data present and runs in a scratch folder (run_env), a machine that passes the proof, GPU and package checks,
    and verl replaced by a fake that 'trains' two steps, resuming where the config says."""
    monkeypatch.setattr(launch, "check", lambda *a, **k: [])  # the proof has tests of its own; this is about folders
    monkeypatch.setattr(launch, "gpu_problems", lambda *a, **k: [])
    monkeypatch.setattr(launch, "missing_packages", lambda *a, **k: [])
    trained = []

    def fake_verl(command, cwd, env, log=None):
        cfg = yaml.safe_load((Path(cwd) / "config.yaml").read_text())
        run_cfg = cfg["trainer"]
        start = 0
        if run_cfg["resume_mode"] == "resume_path":
            start = int(Path(run_cfg["resume_from_path"]).name.split("_")[-1])
        checkpoints = Path(run_cfg["default_local_dir"])
        # verl's save, in its order, then its driver-side callback with the env Ray gives the driver
        callback = load_class_from_fqn(run_cfg["checkpoint_callback_class"], "CheckpointCallback")(config=cfg)
        for name, value in cfg["ray_kwargs"]["ray_init"]["runtime_env"].get("env_vars", {}).items():
            monkeypatch.setenv(name, value)
        for step in range(start + 1, start + 3):
            folder = checkpoints / f"global_step_{step}"
            (folder / "actor").mkdir(parents=True, exist_ok=True)  # over a partial save, as verl does
            (folder / "data.pt").write_bytes(b"dataloader state")
            (checkpoints / resume.TRACKER).write_text(str(step))
            callback.on_save(trainer=None, global_step=step, checkpoint_dir=str(folder))
        Path(env["VERL_FILE_LOGGER_PATH"]).write_text(json.dumps({"step": start + 1, "data": {}}) + "\n")
        trained.append((start, Path(cwd)))
        return 0

    monkeypatch.setattr(launch.supervisor, "run", fake_verl)
    return trained


def snapshot(folder: Path) -> dict:
    """Every file and folder under `folder`, with its content hash: equal snapshots mean nothing was modified."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def run(args=(), mode="auto", dry=False):
    return launch.launch(catalog.get(QWEN), list(args), mode=mode, dry=dry)


@pytest.mark.slow
def test_same_config_resumes_and_says_so_before_verl_starts(workspace, capsys):
    code, first, _ = run()
    assert code == 0 and workspace[-1][0] == 0
    assert "fresh run in" in capsys.readouterr().out
    code, second, cfg = run(["trainer.total_epochs=3", "trainer.test_freq=7"])  # safe to change on resume
    out = capsys.readouterr().out
    run_dir = first.parent.parent
    assert f"resuming {run_dir / 'checkpoints' / 'global_step_2'} at step 2" in out
    assert out.index("resuming") < out.index("run here:")  # said before the command
    assert workspace[-1][0] == 2 and second.parent.parent == run_dir
    assert cfg.trainer.resume_mode == "resume_path"
    record = json.loads((second / launch.LAUNCH_RECORD).read_text())
    assert record["exit_code"] == 0 and record["resumed_from"].endswith("global_step_2")


@pytest.mark.slow
def test_changed_learning_rate_stops_naming_the_key_and_both_values(workspace):
    run()
    before = snapshot(resume.runs_dir())
    with pytest.raises(RecipeError) as err:
        run([f"{LR}=2e-6"])
    message = str(err.value)
    assert f"{LR}: 1e-06 -> 2e-06" in message
    assert "RESUME=never" in message and "RESUME=force" in message and "qwen25-7b-grpo-v1-2" in message
    assert snapshot(resume.runs_dir()) == before and len(workspace) == 1


@pytest.mark.slow
def test_force_resumes_a_changed_config_and_never_starts_a_new_folder(workspace, capsys):
    _, first, _ = run()
    run_dir = first.parent.parent
    _, forced, _ = run([f"{LR}=2e-6"], mode="force")
    assert "RESUME=force despite 1 changed key(s)" in capsys.readouterr().out
    assert forced.parent.parent == run_dir and workspace[-1][0] == 2
    earlier = snapshot(run_dir)
    _, fresh, cfg = run([f"{LR}=2e-6"], mode="never")
    assert fresh.parent.parent == resume.runs_dir() / "qwen25-7b-grpo-v1-2"
    assert cfg.trainer.resume_mode == "disable" and workspace[-1][0] == 0
    assert snapshot(run_dir) == earlier  # the new run wrote nothing into the old folder
    stored = yaml.safe_load((fresh.parent.parent / resume.STORED).read_text())
    assert stored["actor_rollout_ref"]["actor"]["optim"]["lr"] == 2e-6


@pytest.mark.slow
def test_a_smoke_after_a_smoke_trains_again_in_its_own_folder(workspace, capsys):
    recipe = catalog.get(QWEN)
    smoke.run(recipe, None, None)
    first = workspace[-1][1].parent.parent
    earlier = snapshot(first)
    smoke.run(recipe, None, None)
    second = workspace[-1][1].parent.parent
    assert [start for start, _ in workspace] == [0, 0]  # both trained from step 0
    assert first.name == "qwen25-7b-grpo-v1-smoke" and second.name == "qwen25-7b-grpo-v1-smoke-2"
    assert snapshot(first) == earlier
    trainer = yaml.safe_load((workspace[-1][1] / "config.yaml").read_text())["trainer"]
    assert trainer["resume_mode"] == "disable" and trainer["default_local_dir"] == str(second / "checkpoints")


@pytest.mark.slow
def test_dry_launch_prints_the_plan_and_creates_nothing(workspace, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch, "gpu_problems", lambda *a, **k: ["no GPU"])  # dry runs work on a CPU machine
    monkeypatch.setenv("RL_DATA_DIR", str(tmp_path / "nodata"))
    code, launch_dir, _ = run(dry=True)
    out = capsys.readouterr().out
    assert code == 0 and not resume.runs_dir().exists() and not workspace
    assert f"config: {launch_dir / 'config.yaml'}" in out
    assert "data to prepare: gsm8k_math" in out
    assert "fresh run in" in out and "-m verl.trainer.main_ppo --config-path=" in out


@pytest.mark.slow
def test_runs_lists_recipe_last_step_status_and_folder(workspace):
    run()
    rows = resume.list_runs()
    assert len(rows) == 1
    assert "qwen25-7b-grpo/v1" in rows[0] and "step 2" in rows[0] and "done" in rows[0]
    assert rows[0].endswith(str(resume.runs_dir() / "qwen25-7b-grpo-v1"))


def test_unknown_mode_is_refused_with_the_choices():
    with pytest.raises(RecipeError, match="RESUME='sometimes': use one of auto, never, force"):
        resume.decide("x", compose(catalog.get(QWEN)), "sometimes")


@pytest.mark.slow
def test_a_checkpoint_cut_mid_save_is_passed_over_and_named(workspace, capsys):
    """A run killed after verl wrote step 3's actor/ but before the save returned: no marker, so the relaunch (and
    its dry run) resumes step 2 and names step 3 as passed over."""
    _, first, _ = run()
    checkpoints = first.parent.parent / "checkpoints"
    (checkpoints / "global_step_3" / "actor").mkdir(parents=True)
    (checkpoints / resume.TRACKER).write_text("3")  # even a tracker that moved does not make it whole
    capsys.readouterr()
    run(dry=True)
    planned = capsys.readouterr().out
    run()
    out = capsys.readouterr().out
    for said in (planned, out):
        assert f"resuming {checkpoints / 'global_step_2'} at step 2" in said
        assert "passed over 1 incomplete checkpoint(s), their save never finished: global_step_3" in said
    assert workspace[-1][0] == 2


@pytest.mark.slow
def test_a_run_with_only_an_incomplete_checkpoint_starts_fresh_in_a_new_folder(workspace, capsys):
    _, first, _ = run()
    run_dir = first.parent.parent
    for complete in (run_dir / "checkpoints").glob("global_step_*/COMPLETE"):
        complete.unlink()  # a folder from before the markers: only the tracker's step, when whole, counts
    (run_dir / "checkpoints" / "global_step_2" / "data.pt").unlink()
    earlier = snapshot(run_dir)
    capsys.readouterr()
    _, second, _ = run()
    out = capsys.readouterr().out
    assert "fresh run in" in out and "global_step_1, global_step_2" in out and workspace[-1][0] == 0
    assert second.parent.parent != run_dir and snapshot(run_dir) == earlier


@pytest.mark.slow
def test_pruning_keeps_the_newest_complete_checkpoints(workspace):
    _, first, cfg = run(["trainer.max_actor_ckpt_to_keep=1"])
    assert cfg.trainer.max_actor_ckpt_to_keep is None  # verl's own pruning is off: the marker's callback prunes
    assert sorted(p.name for p in (first.parent.parent / "checkpoints").glob("global_step_*")) == ["global_step_2"]


def failing_then(workspace_fake, codes: list[int], trains: list[bool]):
    """The fixture's fake verl, whose launches exit with `codes` in turn; a launch that does not train writes no
    metrics (it failed in its start-up)."""
    calls = iter(zip(codes, trains))

    def fake(command, cwd, env, log=None):
        code, trains_a_step = next(calls)
        if trains_a_step:
            workspace_fake(command, cwd, env, log)
        return code

    return fake


@pytest.mark.slow
def test_restarts_relaunch_a_run_that_failed_after_training_from_its_checkpoint(workspace, monkeypatch, capsys):
    monkeypatch.setattr(launch.supervisor, "run", failing_then(launch.supervisor.run, [1, 1, 0], [True] * 3))
    code, last, _ = launch.launch_restarting(catalog.get(QWEN), [], restarts=3, mode="never")
    out = capsys.readouterr().out
    assert code == 0
    assert [start for start, _ in workspace] == [0, 2, 4]  # each relaunch resumed the newest complete checkpoint
    assert len({folder.parent.parent for _, folder in workspace}) == 1  # one run folder, RESUME=never only at first
    assert out.count("[restart]") == 2 and "[restart] 2 of 3: the launch in" in out


@pytest.mark.slow
def test_restarts_stop_at_their_count_and_at_a_failed_start_up(workspace, monkeypatch, capsys):
    verl = launch.supervisor.run
    monkeypatch.setattr(launch.supervisor, "run", failing_then(verl, [1, 1, 0], [True] * 3))
    assert launch.launch_restarting(catalog.get(QWEN), [], restarts=1)[0] == 1
    assert len(workspace) == 2
    monkeypatch.setattr(launch.supervisor, "run", failing_then(verl, [1, 0], [False, True]))
    assert launch.launch_restarting(catalog.get(QWEN), [], restarts=5)[0] == 1
    assert len(workspace) == 2  # the start-up failure was not relaunched
    assert "[restart] not relaunching: the launch in" in capsys.readouterr().out
    with pytest.raises(RecipeError, match="RESTARTS=-1"):
        launch.launch_restarting(catalog.get(QWEN), [], restarts=-1)

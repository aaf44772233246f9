"""Recipe mechanics: every recipe proven against the installed verl, and every kind of bad input named."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from verl_recipes import catalog, cli
from verl_recipes.catalog import REPO
from verl_recipes.check.recipe import check
from verl_recipes.compose import compose, flatten

QWEN = "qwen25-7b-grpo"


def _edit_yaml(path: Path, edit) -> None:
    text = path.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    data = yaml.safe_load(text)
    edit(data)
    path.write_text(header + yaml.safe_dump(data, sort_keys=False))


def test_show_holds_the_tuned_values():
    cfg = compose(catalog.get(QWEN))
    arr, longest = cfg.actor_rollout_ref, 1024 + 2048
    assert arr.model.use_remove_padding and arr.actor.use_dynamic_bsz and cfg.trainer.balance_batch
    assert arr.actor.ppo_max_token_len_per_gpu == 8 * longest
    assert arr.ref.log_prob_max_token_len_per_gpu == arr.rollout.log_prob_max_token_len_per_gpu == 16 * longest
    assert not arr.model.use_fused_kernels  # untied lm_head: fused kernels crash on FSDP2 (check/model.py)
    assert not arr.actor.fsdp_config.param_offload and not arr.actor.fsdp_config.optimizer_offload
    assert arr.rollout.gpu_memory_utilization >= 0.7 and arr.rollout.enforce_eager is False
    assert arr.rollout.tensor_model_parallel_size == 1 and arr.rollout.enable_chunked_prefill
    assert cfg.reward.custom_reward_function.path == "pkg://verl_recipes.rewards.math"
    assert cfg.trainer.experiment_name == "qwen25-7b-grpo-v1"
    assert cfg.trainer.default_local_dir.endswith("runs/qwen25-7b-grpo-v1/checkpoints")


def test_megatron_variant_changes_the_engine_with_the_seed_layout():
    cfg = compose(catalog.get(QWEN, variant="megatron"))
    assert cfg.model_engine == "megatron" and cfg.actor_rollout_ref.actor.strategy == "megatron"
    megatron = cfg.actor_rollout_ref.actor.megatron
    assert (megatron.tensor_model_parallel_size, megatron.pipeline_model_parallel_size) == (2, 1)


def test_make_show_prints_the_composed_config():
    out = subprocess.run(["make", "-s", f"{QWEN}-show", "ARGS=trainer.total_epochs=2"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    cfg = yaml.safe_load(out)
    assert cfg["trainer"]["total_epochs"] == 2 and cfg["actor_rollout_ref"]["actor"]["use_dynamic_bsz"] is True


@pytest.mark.slow
@pytest.mark.parametrize("override, named", [
    ("trainer.total_epoch=2", "did you mean trainer.total_epochs"),  # command-line typo
    ("+actor_rollout_ref.actor.ppo_mini_batchsize=2", "'actor_rollout_ref.actor.ppo_mini_batchsize' is not a key"),
    ("custom_reward_function.path=/tmp/r.py", "use reward.custom_reward_function"),  # legacy, ignored by main_ppo
    ("reward_model.reward_manager=dapo", "use reward.reward_manager.name"),
    ("+reward_model.reward_kwargs.max_resp_len=4", "+reward.reward_kwargs"),
    ("actor_rollout_ref.actor.freeze_vision_tower=true", "configs/vision/frozen"),  # the 0.9.1 no-op
    ("actor_rollout_ref.actor.megatron.grad_offload=true", "removed in 0.9.1"),
    ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1000", "smaller than the longest sequence"),
    ("reward.custom_reward_function.path=pkg://verl_recipes.rewards.no_such_reward", "does not import"),
    ("data.train_files=/nonexistent/train.parquet", "'data.train_files' = /nonexistent/train.parquet: not found"),
    ("actor_rollout_ref.model.path=org/unknown-model", "add models/org/unknown-model/config.json"),
])
def test_bad_overrides_are_rejected_naming_the_key(override, named):
    errors = check(catalog.get(QWEN), override)
    assert any(named in e for e in errors), errors


def test_a_key_under_an_interpolated_node_names_the_key_it_copies():
    """Hydra calls a key under a node set to `${...}` unknown, though the node exists: the message names the key the
    node copies, and setting that one reaches the node."""
    vl = catalog.parse("qwen25-vl-7b-geo3k-dapo")
    leaf = "actor_rollout_ref.rollout.engine_kwargs.vllm.mm_processor_kwargs.max_pixels"
    with pytest.raises(catalog.RecipeError, match=r"lies under '\S+vllm.mm_processor_kwargs', which the recipe sets "
                                                  r"to \$\{data.mm_processor_kwargs\}.*set data.mm_processor_kwargs "):
        compose(vl, [f"{leaf}=1003520"], naming=False)
    assert compose(vl, ["data.mm_processor_kwargs.max_pixels=1003520"], naming=False).actor_rollout_ref.rollout \
        .engine_kwargs.vllm.mm_processor_kwargs.max_pixels == 1003520


@pytest.mark.slow
def test_a_typo_inside_a_recipe_yaml_names_the_key_and_the_file(scratch_root):
    path = scratch_root / "recipes" / QWEN / "v1" / "recipe.yaml"
    _edit_yaml(path, lambda d: d["actor_rollout_ref"]["actor"].update(ppo_mini_batchsize=64))
    errors = check(catalog.get(QWEN))
    assert any("recipes/qwen25-7b-grpo/v1/recipe.yaml: 'actor_rollout_ref.actor.ppo_mini_batchsize'" in e
               and "ppo_mini_batch_size" in e for e in errors), errors


def test_a_typo_inside_a_fragment_names_the_key_and_the_file(scratch_root):
    path = scratch_root / "configs" / "rollout" / "vllm.yaml"
    _edit_yaml(path, lambda d: d["actor_rollout_ref"]["rollout"].update(gpu_memory_utilisation=0.9))
    errors = check(catalog.get(QWEN))
    assert any(e.startswith(f"{QWEN}/v1: configs/rollout/vllm.yaml: 'actor_rollout_ref.rollout.gpu_memory_utilisation'")
               for e in errors), errors


@pytest.mark.slow
def test_a_legacy_reward_key_in_a_fragment_is_rejected(scratch_root):
    path = scratch_root / "configs" / "reward" / "math.yaml"
    _edit_yaml(path, lambda d: d.update(custom_reward_function={"path": "pkg://verl_recipes.rewards.math", "name": "compute_score"}))
    errors = check(catalog.get(QWEN))
    assert any("configs/reward/math.yaml: 'custom_reward_function.path' is accepted but ignored" in e for e in errors)


def test_open_dicts_pass_through_unchecked():
    assert check(catalog.get(QWEN), "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype=fp8") == []


@pytest.mark.slow
def test_cp_then_one_edit_is_proven_and_differs_by_exactly_that_key(scratch_root, capsys):
    assert cli.main(["cp", QWEN, "my-grpo"]) == 0
    new = scratch_root / "recipes" / "my-grpo" / "v1"
    card = yaml.safe_load((new / "card.yaml").read_text())
    assert card["status"] == "unverified" and "results" not in card
    # the source's learning run is its own; its task is the workload's
    assert "learns" not in card and card["learn_task"] == catalog.get(QWEN).card["learn_task"]
    assert check(catalog.get("my-grpo")) == []  # inherits and is proven before any edit
    with (new / "recipe.yaml").open("a") as f:
        f.write("actor_rollout_ref:\n  actor:\n    optim:\n      lr: 2.0e-6\n")
    assert check(catalog.get("my-grpo")) == []
    capsys.readouterr()
    assert cli.main(["diff", QWEN, "my-grpo"]) == 0
    assert capsys.readouterr().out.splitlines() == ["actor_rollout_ref.actor.optim.lr: 1e-06 -> 2e-06",
                                                    "1 key(s) set differently"]
    assert cli.main(["cp", QWEN, "my-grpo"]) == 2  # never overwrites


@pytest.mark.slow
def test_a_copy_is_lenient_until_published_then_held_to_pins_and_reasons(scratch_root, capsys):
    assert cli.main(["cp", QWEN, "my-grpo"]) == 0
    recipe_file = scratch_root / "recipes/my-grpo/v1/recipe.yaml"
    with recipe_file.open("a") as f:
        f.write("actor_rollout_ref:\n  actor:\n    optim:\n      lr: 2.0e-6\n")
    capsys.readouterr()
    # unpublished: the parent's upstream record lists the edit, for information; nothing fails
    assert cli.main(["check", "my-grpo"]) == 0
    assert cli.main(["upstream", "my-grpo"]) == 0
    out = capsys.readouterr().out
    assert "actor_rollout_ref.actor.optim.lr: ours 2e-06, upstream 1e-06: UNEXPLAINED" in out
    assert "edits of this copy against qwen25-7b-grpo/v1, for information" in out
    assert cli.main(["pin", "my-grpo"]) == 2  # no pins for a copy until it is published
    # published: pins written, the unexplained edit fails check until its reason is written beside it
    assert cli.main(["publish", "my-grpo"]) == 0
    assert (scratch_root / "recipes/my-grpo/v1/resolved/recipe.yaml").is_file()
    assert "published" not in yaml.safe_load((scratch_root / "recipes/my-grpo/v1/card.yaml").read_text())
    capsys.readouterr()
    assert cli.main(["check", "my-grpo"]) == 1
    assert "'actor_rollout_ref.actor.optim.lr' = 2e-06 differs from the published run" in capsys.readouterr().out
    recipe_file.write_text(recipe_file.read_text().replace("lr: 2.0e-6", "lr: 2.0e-6  # deviation: a faster start"))
    assert cli.main(["pin", "my-grpo"]) == 0  # the README table now carries the reason
    assert cli.main(["check", "my-grpo"]) == 0, capsys.readouterr().out
    assert cli.main(["publish", "my-grpo"]) == 2  # once


@pytest.mark.slow
def test_versions_inherit_and_the_latest_is_the_default(scratch_root):
    v2 = scratch_root / "recipes" / QWEN / "v2"
    v2.mkdir()
    (v2 / "recipe.yaml").write_text("# @package _global_\ndefaults:\n  - /recipes/qwen25-7b-grpo/v1/recipe\n  - _self_\n"
                                    "actor_rollout_ref:\n  rollout:\n    n: 8\n")
    shutil.copy(scratch_root / "recipes" / QWEN / "v1" / "card.yaml", v2 / "card.yaml")
    latest = catalog.get(QWEN)
    assert latest.version == "v2" and compose(latest).actor_rollout_ref.rollout.n == 8
    assert compose(catalog.get(QWEN, "v1")).actor_rollout_ref.rollout.n == 5
    v1, v2 = (flatten(compose(r, naming=False)) for r in (catalog.get(QWEN, "v1"), latest))
    diff = {k for k, v in v2.items() if v1.get(k) != v}
    # rollout_n of actor, ref and critic follow rollout.n by interpolation in verl's own config
    assert diff == {"actor_rollout_ref.rollout.n", "actor_rollout_ref.ref.rollout_n", "actor_rollout_ref.actor.rollout_n",
                    "critic.rollout_n"}


def test_unknown_recipe_version_and_variant_say_what_exists():
    for kwargs, named in (({"name": "nope"}, "no recipe 'nope'"), ({"name": QWEN, "version": "v9"}, "has: v1"),
                          ({"name": QWEN, "variant": "fast"}, "has no variant .fast.")):
        with pytest.raises(catalog.RecipeError, match=named):
            catalog.get(**kwargs)


def test_launch_without_gpus_stops_at_once_before_any_download(tmp_path):
    env = {**os.environ, "PATH": "/usr/bin:/bin", "RL_DATA_DIR": str(tmp_path / "data"), "RL_RUNS_DIR": str(tmp_path / "runs"),
           "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "verl_recipes.cli", "run", QWEN], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "no NVIDIA GPU on this machine" in result.stderr and "make qwen25-7b-grpo-check" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_verl_entry_point_accepts_the_resolved_run_config(tmp_path, monkeypatch):
    """What the launcher hands verl: its own main_ppo loads the file (Hydra --cfg job prints it without running)."""
    from verl_recipes.launch import plan_launch, verl_command, write_launch

    monkeypatch.setenv("RL_RUNS_DIR", str(tmp_path))
    recipe = catalog.get(QWEN)
    plan = plan_launch(recipe, [], dry=True)
    write_launch(plan)
    run_dir = plan.launch_dir
    command = verl_command(recipe, run_dir) + ["--cfg", "job"]
    out = subprocess.run(command, cwd=run_dir, capture_output=True, text=True, timeout=300, check=True).stdout
    loaded = yaml.safe_load(out)
    assert loaded["actor_rollout_ref"]["actor"]["ppo_max_token_len_per_gpu"] == 24576
    assert loaded["trainer"]["experiment_name"] == "qwen25-7b-grpo-v1"


@pytest.mark.slow
def test_a_relative_data_dir_names_the_same_files_for_the_recipe_and_data_prep(monkeypatch, tmp_path):
    """RL_DATA_DIR=data (relative) must not make the recipe's data look unproduced."""
    from verl_recipes.data.prepare import outputs

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RL_DATA_DIR", "reldata")
    cfg = compose(catalog.get(QWEN))
    assert cfg.data.train_files == str(outputs("gsm8k_math")[0]) == str(tmp_path / "reldata/gsm8k_math/train.parquet")
    assert check(catalog.get(QWEN)) == []


@pytest.mark.slow  # two spawned workers, each importing verl
def test_make_check_over_worker_processes_proves_and_fails_as_one_process_does():
    """`check all --jobs N` hands its proofs to N spawned processes: the same verdicts, in the same order, a
    broken run included (a typo'd override names its key either way)."""
    recipe = catalog.get(QWEN)
    tasks = [("run", (recipe, " typo", ["actor_rollout_ref.rollout.nn=8"])), ("run", (recipe, "", []))]
    alone = list(cli._proofs(tasks, 1))
    assert not alone[1] and "rollout.nn" in alone[0][0]
    assert list(cli._proofs(tasks, 2)) == alone


def test_make_check_takes_a_worker_an_idle_cpu_up_to_its_cap(monkeypatch):
    monkeypatch.setattr(cli, "running_elsewhere", lambda: 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert cli.check_jobs() == cli.MAX_CHECK_JOBS
    monkeypatch.delattr(os, "sched_getaffinity")  # macOS: no affinity, the CPU count
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert cli.check_jobs() == 2
    monkeypatch.setattr(cli, "running_elsewhere", lambda: 1)  # make test's other worker
    assert cli.check_jobs() == 1
    monkeypatch.setattr(cli, "running_elsewhere", lambda: 5)  # busier than it has CPUs: still one
    assert cli.check_jobs() == 1


def test_the_processes_running_elsewhere_leave_this_one_out():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        assert cli.running_elsewhere() >= 1  # the busy loop, whatever else runs
    finally:
        busy.kill()
        busy.wait()

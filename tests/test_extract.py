"""Extraction of a cited script's overrides (verl_recipes/extract.py, upstream_script.py, legacy_keys.py): bash
resolves the script with every program absent; every override lands in upstream.yaml in 0.9.1 names; a re-run
changes nothing."""

import os
from pathlib import Path

import pytest
import yaml

from verl_recipes import catalog, extract, upstream_script
from verl_recipes.catalog import RecipeError

SCRIPT = Path(__file__).parent / "fixtures/upstream/launch.sh"
SOURCE = {"repo": "example/repo", "path": "launch.sh", "commit": "0" * 40}


def test_bash_resolves_defaults_arithmetic_branches_continuations_and_arrays():
    module, arguments = upstream_script.launch(SCRIPT.read_text(), "launch.sh")
    assert module == "verl.trainer.main_ppo"
    assert upstream_script.overrides(arguments) == [
        "data.train_batch_size=256",  # ${VAR:-x}
        "data.max_prompt_length=1024",  # $((...))
        "data.max_response_length=2048",
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=6144",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
        "actor_rollout_ref.actor.megatron.grad_offload=True",
        "actor_rollout_ref.actor.optim.lr=1e-6",  # ARRAY+=(...)
        "reward_model.reward_manager=dapo",
        "+reward_model.reward_kwargs.max_resp_len=2048",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",  # the GPU branch: python3 is absent
        'trainer.logger=["console","wandb"]',
        "trainer.default_local_dir=$HOME/ckpts/run",  # the same on every machine
        "trainer.n_gpus_per_node=8",  # the last line of the continuation, before the pipe
    ]


def test_every_override_lands_in_its_0_9_1_key_or_says_why_it_has_none(monkeypatch):
    monkeypatch.setattr(upstream_script, "script_text", lambda source, git_dirs=None: SCRIPT.read_text())
    monkeypatch.setattr(extract, "script_text", upstream_script.script_text)
    values = extract.passed(SOURCE)
    schema = extract._schema(catalog.get("qwen25-7b-grpo"), values)
    settings, translated = extract.translated(values, schema, "launch.sh")
    assert settings["actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"] == 2
    assert settings["reward.reward_manager.name"] == "dapo"
    assert settings["reward.reward_kwargs.max_resp_len"] == 2048
    assert settings["actor_rollout_ref.actor.optim.lr"] == 1e-6
    assert settings["trainer.logger"] == ["console", "wandb"]
    assert "actor_rollout_ref.actor.megatron.grad_offload" not in settings
    assert translated["actor_rollout_ref.actor.megatron.grad_offload"].startswith("none: removed between verl 0.9.0")
    assert translated["reward_model.reward_manager"] == "reward.reward_manager.name"
    assert len(settings) + sum(v.startswith("none:") for v in translated.values()) == len(values) == 14


def test_a_key_nobody_translated_stops_the_extraction_naming_it():
    schema = {"data.train_batch_size"}
    with pytest.raises(RecipeError, match="'actor_rollout_ref.actor.made_up' is not a verl 0.9.1 key"):
        extract.translated({"actor_rollout_ref.actor.made_up": 1}, schema, "launch.sh")
    with pytest.raises(RecipeError, match="'reward_model.enable' is not a verl 0.9.1 key"):  # accepted, ignored
        extract.translated({"reward_model.enable": True}, {"reward_model.enable"}, "launch.sh")


def test_a_script_without_one_trainer_launch_is_refused():
    with pytest.raises(RecipeError, match="expected one trainer launch .* found none"):
        upstream_script.launch("echo hello\n", "x.sh")


def test_extract_writes_upstream_yaml_and_a_rerun_changes_nothing(scratch_root, monkeypatch):
    monkeypatch.setattr(extract, "script_text", lambda source, git_dirs=None: SCRIPT.read_text())
    recipe = catalog.get("qwen25-7b-grpo")
    path = scratch_root / "recipes/qwen25-7b-grpo/v1/upstream.yaml"
    data = yaml.safe_load(path.read_text())
    data["recipe"]["settings"] = {"data.train_batch_size": 1}  # hand-picked: replaced by the extraction
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert extract.extract(recipe) is True
    written = yaml.safe_load(path.read_text())
    assert written["recipe"]["settings"]["data.train_batch_size"] == 256
    assert written["recipe"]["why"] == data["recipe"]["why"]  # hand-written fields stay
    assert "settings" not in written["variants"]["megatron"]  # the recipe's own run: no settings of its own
    text = path.read_text()
    assert extract.extract(recipe) is False and path.read_text() == text


# The cited scripts are read where they live, at their commits, never copied into this repository: point
# UPSTREAM_MIRRORS at a folder of clones or mirrors named <owner>+<name> (e.g. verl-project+verl, a bare git dir or one
# holding `repo`). Without it the test is skipped with that reason; `python -m verl_recipes extract <recipe>
# --git-dir ...` is the same check by hand.
MIRRORS = Path(os.environ.get("UPSTREAM_MIRRORS", "/nonexistent"))


def _git_dirs() -> dict[str, Path]:
    found = {}
    for folder in sorted(MIRRORS.glob("*+*")):
        git_dir = folder / "repo" if (folder / "repo").is_dir() else folder
        found[folder.name.replace("+", "/", 1)] = git_dir
    return found


@pytest.mark.slow
@pytest.mark.skipif(not _git_dirs(), reason="set UPSTREAM_MIRRORS to a folder of <owner>+<name> clones of the cited repos")
@pytest.mark.parametrize("name", sorted({r.name for r in catalog.all_recipes()}))
def test_each_upstream_record_is_what_extract_writes_from_the_cited_scripts(name, scratch_root):
    for version in catalog.versions(name):
        record = scratch_root / "recipes" / name / version / "upstream.yaml"
        before = record.read_text()
        assert extract.extract(catalog.get(name, version), _git_dirs()) is False, f"{record.name} of {name}/{version} is stale"
        assert record.read_text() == before

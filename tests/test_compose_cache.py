"""The compositions one session's processes share (verl_recipes/compose.py, CACHE_ENV): a process reads what another
composed, a damaged file composes again, and an edited recipe never reads the old composition."""

import pytest
from omegaconf import OmegaConf

from verl_recipes import catalog
from verl_recipes import compose as compose_module
from verl_recipes.compose import CACHE_ENV, compose


@pytest.fixture
def shared(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "compositions"))
    (tmp_path / "compositions").mkdir()
    compose_module._hydra_compose.cache_clear()  # as a fresh process
    yield tmp_path / "compositions"
    compose_module._hydra_compose.cache_clear()


def fresh_process_compose(recipe, args=None):
    compose_module._hydra_compose.cache_clear()
    return OmegaConf.to_container(compose(recipe, args, resolve=False))


def test_a_second_process_reads_the_composition_instead_of_composing(shared, monkeypatch):
    recipe = catalog.get("qwen25-7b-grpo")
    first = fresh_process_compose(recipe, ["+configs/smoke=node"])
    assert len(list(shared.glob("*.pickle"))) == 1

    def no_hydra(**kwargs):
        raise AssertionError("composed again")

    monkeypatch.setattr(compose_module, "hydra_compose", no_hydra)
    assert fresh_process_compose(recipe, ["+configs/smoke=node"]) == first
    with pytest.raises(AssertionError, match="composed again"):  # other overrides are another composition
        fresh_process_compose(recipe)


def test_a_damaged_file_composes_again_and_is_replaced(shared):
    recipe = catalog.get("qwen25-7b-grpo")
    first = fresh_process_compose(recipe)
    (path,) = shared.glob("*.pickle")
    path.write_bytes(path.read_bytes()[:100])  # cut short
    assert fresh_process_compose(recipe) == first
    assert fresh_process_compose(recipe) == first and path.stat().st_size > 100


def test_an_edited_recipe_composes_anew(shared, scratch_root):
    recipe = catalog.get("qwen25-7b-grpo")
    before = fresh_process_compose(recipe)
    path = scratch_root / "recipes/qwen25-7b-grpo/v1/recipe.yaml"
    assert "  total_epochs: 15\n" in path.read_text()
    path.write_text(path.read_text().replace("  total_epochs: 15\n", "  total_epochs: 3\n"))
    after = fresh_process_compose(recipe)
    assert after["trainer"]["total_epochs"] == 3 != before["trainer"]["total_epochs"]
    assert len(list(shared.glob("*.pickle"))) == 2


def test_a_copy_of_the_tree_elsewhere_reads_what_the_checkout_composed(shared, scratch_root, monkeypatch):
    """The README test's scratch copy of the repository, a scratch root: the same files under another root are the
    same composition; a recipe copied in beside (`make cp`) changes no other recipe's, but the copy's own composition
    follows its parent's files."""
    from verl_recipes.copy_recipe import copy_recipe

    recipe = catalog.get("deepeyes-qwen25-vl-7b")
    monkeypatch.setenv("RL_RECIPE_ROOT", str(catalog.REPO))  # the checkout first, then the scratch copy
    first = fresh_process_compose(recipe)
    monkeypatch.setenv("RL_RECIPE_ROOT", str(scratch_root))
    copy_recipe(catalog.get("qwen25-7b-grpo"), "my-grpo")
    copied = fresh_process_compose(catalog.get("my-grpo"))
    monkeypatch.setattr(compose_module, "hydra_compose", lambda **kwargs: pytest.fail("composed again"))
    assert fresh_process_compose(recipe) == first
    assert fresh_process_compose(catalog.get("my-grpo")) == copied
    parent = scratch_root / "recipes/qwen25-7b-grpo/v1/recipe.yaml"
    parent.write_text(parent.read_text().replace("  total_epochs: 15\n", "  total_epochs: 3\n"))
    with pytest.raises(pytest.fail.Exception, match="composed again"):
        fresh_process_compose(catalog.get("my-grpo"))


def test_run_names_are_set_on_one_composition_and_a_users_value_stands(shared, monkeypatch):
    recipe = catalog.get("qwen25-7b-grpo", variant="megatron")
    mine = compose(recipe, ["trainer.experiment_name=mine", "trainer.total_epochs=2"])
    assert mine.trainer.experiment_name == "mine" and mine.trainer.project_name == "qwen25-7b-grpo"
    plain = compose(recipe, naming=False)
    monkeypatch.setattr(compose_module, "hydra_compose", lambda **kwargs: pytest.fail("composed again"))
    named = compose(recipe)
    assert named.trainer.experiment_name == recipe.run_name != plain.trainer.experiment_name
    assert named.trainer.project_name == "qwen25-7b-grpo"
    assert named.trainer.default_local_dir == f"{compose_module.runs_dir() / recipe.run_name}/checkpoints"
    assert OmegaConf.to_container(compose(recipe, naming=False)) == OmegaConf.to_container(plain)


def test_the_test_sessions_compositions_outlive_it_until_a_config_file_changes(tmp_path):
    import os

    from conftest import compositions_folder

    config, under = tmp_path / "recipe.yaml", tmp_path / "compositions"
    config.write_text("lr: 1\n")
    first = compositions_folder([config], under)
    assert compositions_folder([config], under) == first  # the next session reads what this one composed
    config.write_text("lr: 2\n")
    second = compositions_folder([config], under)
    assert second != first and first.exists()  # another session may still be writing there
    os.utime(first, (0, 0))  # an hour old and more
    assert compositions_folder([config], under) == second and not first.exists()


def test_make_checks_tiny_models_keep_their_path_under_a_composition_cache(tmp_path, monkeypatch):
    """Under the suite's composition cache a tiny model is built once, at a path named by its builders' sources, so the
    compositions naming it are read back on the next check; without a cache it goes to the run's scratch."""
    from verl_recipes import cli
    from verl_recipes.compose import CACHE_ENV
    from verl_recipes.smoke import tiny

    built = []

    def fake(folder):
        built.append(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text("{}")
        return folder

    monkeypatch.setitem(tiny.MODELS, "qwen2", fake)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    first = cli.tiny_model_folder("qwen2", tmp_path / "scratch1")
    assert cli.tiny_model_folder("qwen2", tmp_path / "scratch2") == first and len(built) == 1
    assert first.is_relative_to(tmp_path / "cache") and (first / "config.json").is_file()
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "scratch3"))  # make check's own scratch cache
    assert cli.tiny_model_folder("qwen2", tmp_path / "scratch3") == tmp_path / "scratch3" / "qwen2"

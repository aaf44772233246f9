"""Hydra's config files are built once per process and copied after (verl_recipes/config_file_memo.py): a composition
reads what a fresh Hydra would, after an edit of a file too, and what one compose changes never reaches the next."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import MissingConfigException
from hydra.plugins.config_source import ConfigLoadError

import verl_recipes.compose  # noqa: F401  (installs the memo)
from verl_recipes import config_file_memo

FileConfigSource = config_file_memo.source_class()


def _compose(folder, name="main", overrides=()):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(config_name=name, overrides=list(overrides))


def test_composing_installs_the_memo_on_the_class_hydra_uses(tmp_path):
    assert FileConfigSource.load_config is config_file_memo.load_config
    (tmp_path / "main.yaml").write_text("lr: 1\n")
    _compose(tmp_path)
    assert any(key[1] == str(tmp_path) for key in config_file_memo._loaded)


def test_a_file_is_read_anew_once_its_bytes_change(tmp_path):
    (tmp_path / "opt").mkdir()
    (tmp_path / "main.yaml").write_text("defaults:\n  - opt: adam\n  - _self_\nlr: 1\n")
    (tmp_path / "opt/adam.yaml").write_text("name: adam\nbetas: [0.9, 0.99]\n")
    assert _compose(tmp_path).opt.name == "adam"
    (tmp_path / "opt/adam.yaml").write_text("name: adaM\nbetas: [0.9, 0.99]\n")  # same size, other bytes
    assert _compose(tmp_path).opt.name == "adaM"
    (tmp_path / "main.yaml").write_text("defaults:\n  - opt: adam\n  - _self_\nlr: 2\n")
    assert _compose(tmp_path).lr == 2


def test_what_a_compose_changes_never_reaches_the_next(tmp_path):
    (tmp_path / "main.yaml").write_text("defaults:\n  - _self_\nlr: 1\nbetas: [0.9, 0.99]\n")
    first = _compose(tmp_path, overrides=["lr=5", "betas=[0.1]"])
    first.betas.append(0.5)
    again = _compose(tmp_path)
    assert (again.lr, list(again.betas)) == (1, [0.9, 0.99])
    assert "defaults" not in again  # Hydra popped it from its copy, as from a fresh load


def test_a_missing_file_fails_as_in_hydra(tmp_path):
    (tmp_path / "main.yaml").write_text("defaults:\n  - opt: sgd\n  - _self_\n")
    (tmp_path / "opt").mkdir()
    with pytest.raises(MissingConfigException, match="opt"):
        _compose(tmp_path)
    source = FileConfigSource(provider="test", path=str(tmp_path))
    with pytest.raises(ConfigLoadError, match="Config not found"):
        source.load_config("absent.yaml")

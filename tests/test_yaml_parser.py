"""The C YAML loader the composing processes use (verl_recipes/yaml_parser.py) reads every file as OmegaConf's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import CONFIG_FILES
from omegaconf import OmegaConf, _utils

import verl_recipes.compose  # noqa: F401  (installs the C loader)
from verl_recipes.yaml_parser import c_loader, omegaconf_loader, safe_load


def test_composing_installs_the_c_loader():
    assert _utils.get_yaml_loader is c_loader
    assert issubclass(c_loader(), yaml.cyaml.CParser) and issubclass(c_loader(), yaml.constructor.SafeConstructor)


@pytest.mark.slow
def test_every_config_file_of_verl_and_of_the_recipes_loads_to_the_same_data():
    assert len(CONFIG_FILES) > 150
    for path in CONFIG_FILES:
        text = path.read_text()
        ours, theirs = yaml.load(text, Loader=c_loader()), yaml.load(text, Loader=omegaconf_loader())
        assert ours == theirs and repr(ours) == repr(theirs), path


@pytest.mark.slow
def test_our_safe_load_reads_every_config_file_and_pin_as_pyyamls_own():
    assert any(path.parent.name == "resolved" for path in CONFIG_FILES)  # the pins, which make check reads
    assert yaml.__with_libyaml__  # the C parser is what makes ours faster: PyYAML's wheels carry it
    for path in CONFIG_FILES:
        text = path.read_text()
        assert safe_load(text) == yaml.safe_load(text), path
    with pytest.raises(yaml.YAMLError):
        safe_load("a: [1\n")


def test_omegaconfs_rules_hold():
    text = "lr: 1e-6\nratio: .5\nwhen: 2026-11-26\nn: 8\npath: !!python/object/apply:pathlib.Path [a, b]\n"
    assert yaml.load(text, Loader=c_loader()) == yaml.load(text, Loader=omegaconf_loader()) == {
        "lr": 1e-6, "ratio": 0.5, "when": "2026-11-26", "n": 8, "path": Path("a/b")}
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key lr"):
        OmegaConf.create(yaml.load("lr: 1\nlr: 2\n", Loader=c_loader()))

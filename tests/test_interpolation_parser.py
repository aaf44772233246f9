"""The memoized interpolation parser the composing processes use (verl_recipes/interpolation_parser.py) parses and
resolves every interpolation of verl's config tree and of the recipes as OmegaConf's own does."""

from __future__ import annotations

import re

import pytest
from conftest import CONFIG_FILES
from omegaconf import OmegaConf, base, grammar_parser
from omegaconf.errors import GrammarParseError, InterpolationResolutionError

import verl_recipes.compose  # noqa: F401  (installs the memo)
from verl_recipes import interpolation_parser

INTERPOLATION = re.compile(r"\$\{.*\}")


def test_composing_installs_the_memo():
    assert grammar_parser.parse is base.parse is interpolation_parser.parse
    tree = base.parse("${a.b}")
    assert base.parse("${a.b}") is tree  # parsed once


def test_every_interpolation_of_verl_and_of_the_recipes_parses_to_omegaconfs_tree():
    values = {m.group(0) for path in CONFIG_FILES for m in INTERPOLATION.finditer(path.read_text())}
    assert len(values) > 50
    for value in values:
        for rule in ("configValue", "singleElement"):
            try:
                theirs = interpolation_parser.omegaconf_parse(value, rule).toStringTree()
            except GrammarParseError:
                with pytest.raises(GrammarParseError):
                    interpolation_parser.parse(value, rule)
                continue
            assert interpolation_parser.parse(value, rule).toStringTree() == theirs, value


def test_resolving_twice_reads_each_nodes_own_values():
    """A shared tree is only read: the same string resolves against each config's own values."""
    text = "${oc.select:x.y,${z}}-${tokens}"
    first = OmegaConf.create({"x": {"y": 1}, "z": 2, "tokens": "a", "v": text})
    second = OmegaConf.create({"x": {}, "z": 3, "tokens": "b", "v": text})
    assert (first.v, second.v) == ("1-a", "3-b")


def test_a_string_that_does_not_parse_fails_every_time():
    for _ in range(2):
        with pytest.raises(GrammarParseError):
            interpolation_parser.parse("${a.b")
    cfg = OmegaConf.create({"v": "${missing}"})
    for _ in range(2):
        with pytest.raises(InterpolationResolutionError):
            _ = cfg.v

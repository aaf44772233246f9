"""YAML on libyaml's C parser: OmegaConf's loader for the processes that compose recipes, and `safe_load` for the
cards, pins and fragments the package reads itself.

Hydra parses each YAML file of verl's config tree again on every compose, with PyYAML's pure-Python parser, and
`make check` composes about 200 configs: parsing was a quarter of its time. This loader is OmegaConf's own (its float
resolver, no timestamps, duplicate keys refused, its pathlib constructors) with the C parser under it; every YAML
file of verl's config tree and of this repository loads to the same data (tests/test_yaml_parser.py).
"""

from __future__ import annotations

import functools

import yaml
from omegaconf import _utils

omegaconf_loader = _utils.get_yaml_loader  # OmegaConf's own, kept before install() replaces it


@functools.cache
def c_loader() -> type:
    """OmegaConf's loader class with libyaml's parser first in line: its own resolvers, constructors and duplicate-key
    check stay inherited, as yaml.CSafeLoader puts the same parser under yaml.SafeLoader's constructor."""

    class Loader(yaml.cyaml.CParser, omegaconf_loader()):
        def __init__(self, stream):
            yaml.cyaml.CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    return Loader


def install() -> None:
    """OmegaConf.load, and so Hydra, parses with the C loader from now on (where PyYAML was built with libyaml)."""
    if yaml.__with_libyaml__:
        _utils.get_yaml_loader = c_loader


def safe_load(text: str):
    """yaml.safe_load on libyaml's parser where PyYAML has it: the same data (yaml.CSafeLoader is SafeLoader's
    constructor and resolver over the C parser), read several times faster; `make check` reads the pinned configs,
    cards and fragments hundreds of times."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))

"""OmegaConf's YAML loader on libyaml's C parser, for the processes that compose recipes.

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
    python_loader = omegaconf_loader()

    class Loader(yaml.CSafeLoader):
        def construct_mapping(self, node: yaml.Node, deep: bool = False):
            keys = set()
            for key_node, _ in node.value:
                if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    continue
                if key_node.value in keys:
                    raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                            f"found duplicate key {key_node.value}", key_node.start_mark)
                keys.add(key_node.value)
            return super().construct_mapping(node, deep=deep)

    Loader.yaml_implicit_resolvers = python_loader.yaml_implicit_resolvers
    Loader.yaml_constructors = dict(python_loader.yaml_constructors)
    return Loader


def install() -> None:
    """OmegaConf.load, and so Hydra, parses with the C loader from now on (where PyYAML was built with libyaml)."""
    if yaml.__with_libyaml__:
        _utils.get_yaml_loader = c_loader

"""Hydra's config files, each read into OmegaConf once per process and copied after, for the processes that compose.

Hydra loads every YAML file of a composition again on every compose (verl's trainer tree is about 45 files), and
OmegaConf builds a node for every value each time: `make check` loaded 5,778 files for 132 compositions, and building
them was a ninth of its time. A copy of a built config costs about a third of building it. A file is known by its
source, its path and its bytes, so an edited file (a test's, a user's between two composes) is read anew; Hydra edits
what it loads (it pops `defaults`), so each load gets its own copy (tests/test_config_file_memo.py).
"""

from __future__ import annotations

import dataclasses
import functools
import os

from verl_recipes.config_copy import copy_config

_loaded: dict[tuple, object] = {}
hydra_load_config = None  # Hydra's own, kept by install()


@functools.cache
def source_class() -> type:
    """The FileConfigSource Hydra uses: its plugin scan executes the plugin modules again, so the class is the one in
    the module after the scan, not one imported before it."""
    from hydra._internal.core_plugins import file_config_source
    from hydra.core.plugins import Plugins

    Plugins.instance()
    return file_config_source.FileConfigSource


def load_config(self, config_path: str):
    """FileConfigSource.load_config, memoized on the file's bytes: a copy of what Hydra built for them."""
    full_path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
    try:
        with open(full_path, "rb") as f:
            key = (self.provider, self.path, config_path, f.read())
    except OSError:
        return hydra_load_config(self, config_path)  # Hydra's own error for a missing file
    if key not in _loaded:
        _loaded[key] = hydra_load_config(self, config_path)
    built = _loaded[key]
    return dataclasses.replace(built, config=copy_config(built.config), header=dict(built.header))


def install() -> None:
    global hydra_load_config
    cls = source_class()
    if cls.load_config is not load_config:
        hydra_load_config, cls.load_config = cls.load_config, load_config

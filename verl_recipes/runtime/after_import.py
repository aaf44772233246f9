"""Run code on a module right after it is imported, without importing it earlier.

verl loads its plugins at `import verl`, in every process of a run; a plugin that patched verl's vLLM modules by
importing them there would import vLLM into every process. A finder on `sys.meta_path` waits for the module instead,
and one finder per module runs every plugin's callback, in the order they were added.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs each of `thens` on module `name` once it is imported."""

    def __init__(self, name: str):
        self.name, self.thens = name, []

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            for then in self.thens:
                then(module)

        spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, then) -> None:
    """`then(module)` now if `name` is imported, else right after its import; once per (name, then)."""
    if name in sys.modules:
        then(sys.modules[name])
        return
    finder = next((f for f in sys.meta_path if isinstance(f, AfterImport) and f.name == name), None)
    if finder is None:
        finder = AfterImport(name)
        sys.meta_path.insert(0, finder)
    if then not in finder.thens:
        finder.thens.append(then)

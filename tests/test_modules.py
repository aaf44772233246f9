"""verl_recipes/runtime/modules.py: the package check finds TransformerEngine's torch extension where TE's own
loader does (transformer_engine/wheel_lib/, how our TE build lays it out; the lent GPU machine's smokes stopped on
'transformer_engine_torch is missing' before this) and still reports a module that is absent."""

import importlib
import sys

from verl_recipes.runtime.modules import module_found


def _package(root, name, files):
    for f in files:
        (root / name / f).parent.mkdir(parents=True, exist_ok=True)
        (root / name / f).write_text("")


def test_te_torch_extension_inside_transformer_engine_counts_as_installed(tmp_path, monkeypatch):
    _package(tmp_path, "transformer_engine", ["__init__.py", "wheel_lib/transformer_engine_torch.cpython-312-x86_64-linux-gnu.so"])
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    sys.modules.pop("transformer_engine", None)
    assert module_found("transformer_engine_torch")


def test_te_without_its_torch_extension_is_reported_missing(tmp_path, monkeypatch):
    _package(tmp_path, "transformer_engine", ["__init__.py", "wheel_lib/libtransformer_engine.so"])
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    sys.modules.pop("transformer_engine", None)
    assert not module_found("transformer_engine_torch")
    assert not module_found("no_such_module_here") and module_found("json")

"""Whether a Python module is installed here, as the package check of the launcher and of each cluster node asks it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# Modules that a package loads from inside itself rather than importing them top-level: TransformerEngine built with
# NVTE_BUILD_USE_NVIDIA_WHEELS (how tests/gpu/build_transformer_engine.sh builds it) puts its torch extension in
# transformer_engine/wheel_lib/, where TE's own loader finds it and find_spec does not.
BUNDLED = {"transformer_engine_torch": "transformer_engine"}


def module_found(name: str) -> bool:
    try:
        if importlib.util.find_spec(name) is not None:
            return True
        package = importlib.util.find_spec(BUNDLED[name]) if name in BUNDLED else None
    except (ImportError, ValueError):
        return False
    folders = (package.submodule_search_locations or []) if package else []
    return any(next(Path(folder).rglob(f"{name}.*.so"), None) for folder in folders)

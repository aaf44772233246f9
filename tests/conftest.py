"""Shared test setup: GPU-only tests are marked `gpu` and skipped where no CUDA device is visible; a scratch copy
of the recipe tree for tests that edit it."""

import shutil

import pytest

from verl_recipes.catalog import REPO


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on a GPU node, or tests/gpu/ on the lent machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def scratch_root(tmp_path, monkeypatch):
    """A copy of recipes/, configs/ and models/ that a test may edit (RL_RECIPE_ROOT points there)."""
    for folder in ("recipes", "configs", "models"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    monkeypatch.setenv("RL_RECIPE_ROOT", str(tmp_path))
    return tmp_path

"""Shared test setup: GPU-only tests are marked `gpu` and skipped where no CUDA device is visible."""

import pytest


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

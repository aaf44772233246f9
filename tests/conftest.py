"""Shared test setup: GPU-only tests are marked `gpu` and skipped where no CUDA device is visible; a scratch copy
of the recipe tree for tests that edit it."""

import shutil
from pathlib import Path

import pytest

from verl_recipes import catalog
from verl_recipes.catalog import REPO
from verl_recipes.compose import compose


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


ONE_ROW = {"data_source": ["openai/gsm8k"], "prompt": [[{"role": "user", "content": "What is 6 * 7?"}]],
           "reward_model": [{"style": "rule", "ground_truth": "42"}]}


def write_parquet(path: Path, columns: dict) -> Path:
    """A parquet file of `columns` ({name: values}): a verl dataset in miniature."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


@pytest.fixture
def run_env(tmp_path, monkeypatch):
    """Data and runs in a scratch folder (as on shared storage): qwen25-7b-grpo's data files exist, one row each."""
    monkeypatch.setenv("RL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RL_RUNS_DIR", str(tmp_path / "runs"))
    cfg = compose(catalog.get("qwen25-7b-grpo"))
    for key in ("train_files", "val_files"):
        write_parquet(Path(cfg.data[key]), ONE_ROW)
    return tmp_path

"""Shared test setup: GPU-only tests are marked `gpu` and skipped where no CUDA device is visible; a scratch copy
of the recipe tree for tests that edit it."""

import gc
import hashlib
import os
import shutil
import time
from pathlib import Path

# `make test` runs two xdist workers on CI's two cores: one OpenMP thread each, and in the processes they start, or
# torch's thread pools oversubscribe the cores (the retool teach fixture took 427 s under -n 2, 65 s alone)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

from verl_recipes import catalog
from verl_recipes.__main__ import GC_THRESHOLD
from verl_recipes.catalog import REPO
from verl_recipes.compose import CACHE_ENV, compose
from verl_recipes.entrypoints import ENTRYPOINTS

# every YAML file a composition can read: verl's config trees, our fragments, our recipes (their pins included)
VERL_CONFIG_TREES = {Path(entry.config_dir) for entry in ENTRYPOINTS.values()}
CONFIG_FILES = sorted({*(p for tree in VERL_CONFIG_TREES for p in tree.rglob("*.yaml")),
                       *(REPO / "configs").rglob("*.yaml"), *(REPO / "recipes").rglob("*.yaml")})

# One folder of compositions (verl_recipes/compose.py), set before xdist starts its workers, so that they, and the make
# targets and CLIs the tests start, share what any of them composed. It outlives the session: named by the bytes of
# every config file and of compose.py, it serves the next run after a code edit (a rerun of make test-fast composes
# nothing), and an edited YAML file starts a new folder.
COMPOSITIONS = REPO / ".pytest_cache" / "compositions"


def compositions_folder(inputs: list[Path], under: Path) -> Path:
    """The folder of compositions read from `inputs` as they are now; folders an hour old are removed (not newer:
    another session may still write there)."""
    digest = hashlib.blake2b(digest_size=12)
    for path in inputs:
        digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    folder = under / digest.hexdigest()
    for old in under.glob("*"):
        if old != folder and time.time() - old.stat().st_mtime > 3600:
            shutil.rmtree(old, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    os.utime(folder)
    return folder


if CACHE_ENV not in os.environ:
    os.environ[CACHE_ENV] = str(compositions_folder([*CONFIG_FILES, REPO / "verl_recipes" / "compose.py"], COMPOSITIONS))


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_configure(config):
    """The launcher's collection threshold in each test process too (xdist's workers included), set before the test
    modules import verl and torch: the default collects over and over while their modules load (importing verl:
    5.3 -> 4.2 s without collections) and while the tests compose and drop OmegaConf trees. make test-fast: 66-68 ->
    47-51 s (2026-12-02)."""
    gc.set_threshold(*GC_THRESHOLD)


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects what is marked here
def pytest_collection_modifyitems(config, items):
    mark_representatives(items)
    longest_first(items)
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on a GPU node, or tests/gpu/ on the lent machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def mark_representatives(items):
    """A test marked `representative` runs its first case in make test-fast; its other cases are slow."""
    seen = set()
    for item in items:
        if item.get_closest_marker("representative"):
            function = (item.path, item.originalname)
            if function in seen:
                item.add_marker(pytest.mark.slow)
            seen.add(function)


def longest_first(items):
    """Modules with a test marked `longest` go first: make test runs each module on one worker, in this order
    (Makefile: --dist loadscope --no-loadscope-reorder), so the other worker works through the rest beside them
    instead of one of them running alone at the end."""
    first = {item.path for item in items if item.get_closest_marker("longest")}
    items.sort(key=lambda item: item.path not in first)


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


def free_port() -> str:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def run_dry(argv: list[str], out: Path, result: str, **env: str) -> tuple[str, dict]:
    """A bench or calibration dry run as a child (`argv` after the interpreter), its report written to `out`:
    (stdout, the JSON `result` it wrote there). Fails with the child's output tails when it exits non-zero. A
    one-rank child's torch.distributed store gets a free port: a module fixture runs once per xdist worker, and two
    at once on one fixed port fail with EADDRINUSE."""
    import json
    import subprocess
    import sys

    from verl_recipes import bench

    completed = subprocess.run([sys.executable, *argv], cwd=bench.REPO_ROOT,
                               env=bench.child_env(OUT=str(out), **{"MASTER_PORT": free_port(), **env}),
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout, json.loads((out / result).read_text())


@pytest.fixture
def run_env(tmp_path, monkeypatch):
    """Data and runs in a scratch folder (as on shared storage): qwen25-7b-grpo's data files exist, one row each."""
    monkeypatch.setenv("RL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RL_RUNS_DIR", str(tmp_path / "runs"))
    cfg = compose(catalog.get("qwen25-7b-grpo"))
    for key in ("train_files", "val_files"):
        write_parquet(Path(cfg.data[key]), ONE_ROW)
    return tmp_path

"""Side-by-side benchmarks of our tuned settings against verl 0.9.1's defaults and the hardware limits (make bench).
Results and how to read them: bench/README.md at the repository root."""

import os

from verl_recipes.catalog import REPO

REPO_ROOT = str(REPO)


def child_env(**extra: str) -> dict:
    """This process's environment with the repo root first on PYTHONPATH, for `python -m verl_recipes.bench.*`
    children (the lent GPU machine runs from a checkout without `pip install -e .`)."""
    path = os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)

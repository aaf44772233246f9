"""Side-by-side benchmarks of our tuned settings against verl 0.9.1's defaults and the hardware limits (make bench)."""

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(**extra: str) -> dict:
    """This process's environment with the repo root first on PYTHONPATH, for `python -m bench.*` children."""
    path = os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)

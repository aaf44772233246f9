"""`python -m verl_recipes <command>`: the launcher the Makefile drives (verl_recipes/cli.py)."""

import atexit
import gc
import os
import sys

from verl_recipes.cli import main

# Composing and proving a recipe builds and drops OmegaConf trees of some 10^5 objects, which trip Python's default
# collection (every 700 allocations) over and over while torch and verl's modules sit in the heap: a larger first
# threshold made `check all` 9% faster in one process (93 -> 85 s, 2026-11-29). The launcher's process, and the test
# processes (tests/conftest.py), not the make check workers it spawns.
GC_THRESHOLD = (50_000, 20, 100)


def leave(code: int) -> None:
    """Exit without tearing down the interpreter: freeing the modules of torch, verl and transformers took 2-3 s of
    each `make <recipe>-check` (9.7 -> 6.5-7.8 s, 2026-12-02). The exit handlers still run (logging's flush, temporary
    folders' cleanup, multiprocessing's), and the standard streams are flushed; files are closed by `with` blocks."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a reader that left (`| head`), or a stream already closed
            pass
    os._exit(code)


if __name__ == "__main__":  # a `make check` worker process imports this module again
    gc.set_threshold(*GC_THRESHOLD)
    leave(main() or 0)

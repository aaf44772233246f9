"""`python -m verl_recipes <command>`: the launcher the Makefile drives (verl_recipes/cli.py)."""

import sys

from verl_recipes.cli import main

if __name__ == "__main__":  # a `make check` worker process imports this module again
    sys.exit(main())

"""`python -m verl_recipes <command>`: the launcher the Makefile drives (verl_recipes/cli.py)."""

import sys

from verl_recipes.cli import main

sys.exit(main())

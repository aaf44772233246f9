"""verl recipes: the library behind `make <recipe>` (installed editable by `make setup`).

`runtime/` is what verl's Ray workers import (rewards, tools and their sandbox, the vision-freeze hook): the
only part a cluster job ships. Everything else runs where the user types `make`: composing and checking
recipes (`check/`), launching them, planning memory, preparing data, smoke tests, reports and benchmarks.
This file imports nothing, so importing the runtime part never pulls the rest in.
"""

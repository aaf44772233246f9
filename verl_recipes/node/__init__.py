"""`make <recipe>-node`: a recipe at its real model shape (random init) with its own settings, 3 steps on one node of G
GPUs, a record in results/node/ and gates on it.

overrides.py (and overrides.yaml) say what a node run changes in the recipe and why; config.py composes it once and
plans it (which lent machine, how many layers); inputs.py builds the model and the prompts on the node; run.py launches
it through the launcher; record.py reduces what the run left behind (verl's metrics, the run's log as run_log.py reads
it, the per-phase allocator peaks of verl_recipes/runtime/phase_memory.py) to the record, and gates.py gates it.
status.py reads the committed records back: the card status `node-verified (...)` they earn.
"""

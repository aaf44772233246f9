# verl recipes: `make help` lists everything. Recipe targets are discovered from recipes/, never listed here.
SHELL := /bin/bash
# the interpreter every target runs: $(VENV)/bin/python; `make ... VENV=/path/to/env` or `PY=/path/to/python` picks
# another (README "Run a recipe on a GPU node")
VENV ?= .venv
PY := $(VENV)/bin/python
RECIPE := $(PY) -m verl_recipes
# torch first and pinned, so nothing pulls an unpinned CUDA torch (set TORCH_SPEC for your platform)
TORCH_SPEC ?= torch==2.13.0

V ?=
VARIANT ?=
CLUSTER ?=
ARGS ?=
RESUME ?= auto
RESTARTS ?= 0
DRY ?=
SEED ?= 0
# GPUs of the node a `make <recipe>-node` runs on
G ?= 4
RECIPES := $(sort $(notdir $(wildcard recipes/*)))
SELECT = --version "$(V)" --variant "$(VARIANT)" --args "$(ARGS)"

.PHONY: help setup test test-fast lint check pin list runs cp diff $(RECIPES) \
	$(addsuffix -show,$(RECIPES)) $(addsuffix -check,$(RECIPES)) $(addsuffix -plan,$(RECIPES)) \
	$(addsuffix -upstream,$(RECIPES)) $(addsuffix -publish,$(RECIPES)) \
	$(addsuffix -smoke,$(RECIPES)) $(addsuffix -learn,$(RECIPES)) $(addsuffix -node,$(RECIPES)) \
	$(addsuffix -profile,$(RECIPES)) smoke bench bench-dry \
	bench-e2e

help:
	@echo "make setup                      create $(VENV)/ with verl 0.9.1 and the CPU test stack"
	@echo "make test                       the whole test suite, as CI runs it (CPU; GPU tests skip with the reason)"
	@echo "make test-fast                  the unit tier for the edit loop (< 90 s): no minute-scale proofs"
	@echo "make lint                       ruff over the tree"
	@echo "make check                      prove every recipe, version and variant against the installed verl and its pin"
	@echo "make pin                        rewrite the pinned resolved configs (recipes/<name>/<version>/resolved/) on purpose"
	@echo "make list                       recipes, versions, variants and status"
	@echo "make <recipe>                   launch on this GPU node       [V=vN VARIANT=name ARGS=\"k=v ...\"]"
	@echo "make <recipe> RESUME=never      a fresh run folder; RESUME=force resumes a changed config (default auto)"
	@echo "make <recipe> DRY=1             print config path, data to prepare, command, resumption; start nothing"
	@echo "make <recipe> RESTARTS=n        relaunch a run that failed after training, up to n times, from its last checkpoint"
	@echo "make runs                       run folders: recipe, last step, status, folder"
	@echo "make <recipe> CLUSTER=http://<head>:8265   submit to a Ray cluster instead (docs/multinode.md; SLURM:"
	@echo "                                 sbatch --nodes=N scripts/slurm/recipe.sbatch <recipe> [VARIANT=...])"
	@echo "make <recipe>-show              the composed config            [same V/VARIANT/ARGS]"
	@echo "make <recipe>-check             prove it with your overrides   [same V/VARIANT/ARGS]"
	@echo "make <recipe>-plan              per-GPU memory and layout verdict for its declared topology"
	@echo "make <recipe>-upstream          keys that differ from the published run it reproduces, with reasons"
	@echo "make <recipe>-smoke             a few real steps on this 8-GPU node, then metric gates [TINY=dir: 1 GPU]"
	@echo "make <recipe>-learn TINY=dir    1 GPU: a warmed-up tiny model learns its task; gates on score, validation,"
	@echo "                                 train/rollout agreement (dir from python -m verl_recipes.learn.build);"
	@echo "                                 SEED=n reruns it with another prompt order and vLLM sampling (default 0)"
	@echo "make <recipe>-node [G=4]        real model shape (random init), its own settings, 3 steps on this node of G GPUs"
	@echo "                                 (G=8: the 8-GPU node smoke); gates, results/node/ record; DRY=1: plan, prove"
	@echo "make smoke                      every recipe's smoke (on a CPU: DRY=1 prints and proves each config)"
	@echo "make bench                      GPU: actor-update and rollout benchmarks vs verl defaults (bench/README.md)"
	@echo "make bench-dry                  CPU: the same benchmarks on a tiny model"
	@echo "make bench-e2e ARM=ours         GPU: whole GRPO steps of one arm (ours, verl_example, colocated_2gpu,"
	@echo "                                 separate_async, async) [E2E=\"--shape qwen2.5-7b ...\"]; DRY=1: prove all"
	@echo "make <recipe>-profile           profile a few steps  [PRESET=nsys_step|nsys_discrete|torch_rollout|torch_memory"
	@echo "                                 STEPS=[2,3] RANKS=[0] (or all); same V/VARIANT/ARGS]"
	@echo "make cp FROM=<recipe>[/vN][:variant] TO=<new>   a new recipe that inherits FROM"
	@echo "make <recipe>-publish           hold a copy to the rules of a published recipe: pins, explained deviations"
	@echo "make diff A=<recipe>[/vN][:variant] B=<...>     keys that differ between two composed recipes"
	@echo "recipes: $(RECIPES)"

setup:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -r requirements/cpu.txt
	$(PY) -m pip install -q --no-deps -e .
	@$(PY) -c "import verl, hydra, torch; print('verl', verl.__version__, '| torch', torch.__version__)"

# With PYTHONDONTWRITEBYTECODE set (this machine sets it), every run compiles our modules and pytest rewrites every
# test module's asserts again: 8 s of make test-fast's 85 (2 cores, 2026-11-28). Empty, Python writes it (ignored).
test test-fast: export PYTHONDONTWRITEBYTECODE :=

test:
	$(PY) -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder --durations=25 tests

test-fast:
	$(PY) -m pytest -q -n 2 -m "not slow" tests

lint:
	$(PY) -m ruff check .

check:
	$(RECIPE) check all

pin:
	$(RECIPE) pin all

list:
	@$(RECIPE) list

runs:
	@$(RECIPE) runs

cp:
	@test -n "$(FROM)" -a -n "$(TO)" || { echo "usage: make cp FROM=<recipe>[/vN][:variant] TO=<new-name>"; exit 2; }
	$(RECIPE) cp "$(FROM)" "$(TO)"

diff:
	@test -n "$(A)" -a -n "$(B)" || { echo "usage: make diff A=<recipe>[/vN][:variant] B=<recipe>[/vN][:variant]"; exit 2; }
	@$(RECIPE) diff "$(A)" "$(B)"

$(RECIPES):
	$(RECIPE) run $@ $(SELECT) --cluster "$(CLUSTER)" --resume "$(RESUME)" $(if $(filter-out 0,$(RESTARTS)),--restarts "$(RESTARTS)") $(if $(DRY),--dry-run)

$(addsuffix -show,$(RECIPES)): %-show:
	@$(RECIPE) show $* $(SELECT)

$(addsuffix -check,$(RECIPES)): %-check:
	$(RECIPE) check $* $(SELECT)

$(addsuffix -plan,$(RECIPES)): %-plan:
	@$(RECIPE) plan $* $(SELECT)

$(addsuffix -upstream,$(RECIPES)): %-upstream:
	@$(RECIPE) upstream $* $(SELECT)

$(addsuffix -publish,$(RECIPES)): %-publish:
	$(RECIPE) publish $*

SMOKE_FLAGS = $(if $(TINY),--tiny "$(TINY)") $(if $(DRY),--dry-run)
$(addsuffix -smoke,$(RECIPES)): %-smoke:
	$(RECIPE) smoke $* $(SELECT) $(SMOKE_FLAGS)

$(addsuffix -learn,$(RECIPES)): %-learn:
	$(RECIPE) learn $* $(SELECT) --tiny "$(TINY)" --seed "$(SEED)"

$(addsuffix -node,$(RECIPES)): %-node:
	$(RECIPE) node $* $(SELECT) --gpus "$(G)" $(if $(DRY),--dry-run)

smoke:
	$(RECIPE) smoke all --args "$(ARGS)" $(SMOKE_FLAGS)

PRESET ?= nsys_step
STEPS ?= [2,3]
RANKS ?= [0]
# profile_args fails on a bad PRESET/STEPS/RANKS, which stops the target before anything launches
$(addsuffix -profile,$(RECIPES)): %-profile:
	@overrides="$$($(PY) -m verl_recipes.perf.profile_args $* $(SELECT) --preset '$(PRESET)' --steps '$(STEPS)' --ranks '$(RANKS)')" && \
	echo "[profile] $$overrides $(ARGS)" && \
	$(RECIPE) run $* --version "$(V)" --variant "$(VARIANT)" --args "$$overrides $(ARGS)"

# GPU: actor update (packed + dynamic batching vs verl defaults vs padded) and rollout (CUDA graphs, memory);
# each < 6 min, prints a table and writes JSON to $$OUT (bench/README.md has the results)
bench:
	$(PY) -m verl_recipes.bench.actor_update
	$(PY) -m verl_recipes.bench.rollout

bench-dry:
	$(PY) -m verl_recipes.bench.actor_update --cpu-dry-run
	$(PY) -m verl_recipes.bench.rollout --cpu-dry-run

# End to end: one arm of whole GRPO steps per GPU call (bench/README.md "End to end"); DRY=1 proves every arm on CPU
ARM ?= ours
E2E ?=
bench-e2e:
	$(PY) -m verl_recipes.bench.e2e $(if $(DRY),--cpu-dry-run,--arm $(ARM)) $(E2E)

# any other target (a mistyped recipe, `make qwen25-7b-grop-check`): name the known recipes instead of make's bare
# "No rule to make target"
.DEFAULT:
	@$(RECIPE) target "$@"

#!/usr/bin/env bash
# One arm of the end-to-end bench on the lent GPU machine (the kit in ../shared/gpu provides verl + Ray + vLLM), with
# this checkout importable as the installed package is and the kit's spares on PYTHONPATH. Without them the `ours`
# arm stopped before start-up (2026-11-26): first "No module named 'verl_recipes.rewards'", then "python module
# 'mathruler' is missing" (the recipes' math reward).
# Usage: bash tests/gpu/bench_e2e.sh --arm ARM [--work /tmp/e2e_ARM] [other verl_recipes.bench.e2e arguments]
# Two arms side by side on one machine need their own --work folders.
set -uo pipefail
source "$(dirname "$0")/checkout_path.sh"
source "$(dirname "$0")/kit_spares.sh"
python3 -m verl_recipes.bench.e2e "$@"

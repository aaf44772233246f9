#!/usr/bin/env bash
# Smoke of recipes on tiny random-init models (lent GPU machine; the kit in ../shared/gpu provides verl + Ray + vLLM).
# Usage: bash tests/gpu/smoke_tiny.sh RECIPE[:VARIANT][@OVERLAY] TINY_DIR [RECIPE TINY_DIR ...]
# One GPU by default; async variants take two (their cards' tiny_overlay gives the trainer and the rollout one
# each), and @OVERLAY picks another tiny layout of a card's tiny_overlay list (e.g. two GPUs with EP 2 and TP 2).
# A TINY_DIR that does not exist yet is built first (python -m verl_recipes.smoke.tiny, the card's tiny family).
# SMOKE_ARGS: Hydra overrides for every smoke, e.g. SMOKE_ARGS="configs/rollout=sglang" (issue 46; with the SGLang
# layer set on PYTHONPATH: tests/gpu/pack_sglang.sh env).
# Copies each run's smoke.json, metrics and config to $OUT when it is set.
set -uo pipefail
source "$(dirname "$0")/checkout_path.sh"
source "$(dirname "$0")/kit_spares.sh"
export RL_RUNS_DIR="${RL_RUNS_DIR:-/tmp/runs}"
status=0
while [ $# -ge 2 ]; do
  spec=$1 tiny=$2; shift 2
  recipe=${spec%%@*} overlay=""; [[ "$spec" == *@* ]] && overlay=${spec#*@}
  variant=""; [[ "$recipe" == *:* ]] && variant=${recipe#*:}
  [ -e "$tiny" ] || python3 -m verl_recipes.smoke.tiny "$tiny" --recipe "$recipe" || { status=1; continue; }
  python3 -m verl_recipes smoke "${recipe%%:*}" --variant "$variant" --tiny "$tiny" --overlay "$overlay" --args "${SMOKE_ARGS:-}" || status=1
  if [ -n "${OUT:-}" ]; then
    run=$(ls -td "$RL_RUNS_DIR"/*-smoke*/launches/*/ 2>/dev/null | head -1)
    name=${spec//[:\/@]/_}
    n=1; while [ -e "$OUT/$name.smoke.json" ]; do n=$((n + 1)); name="${spec//[:\/@]/_}.$n"; done  # a re-run
    for f in smoke.json metrics.jsonl config.yaml launch.json; do [ -f "$run/$f" ] && cp "$run/$f" "$OUT/$name.$f"; done
  fi
done
exit $status

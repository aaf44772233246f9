#!/usr/bin/env bash
# Learning runs on the lent GPU machine (the kit in ../shared/gpu provides verl + Ray + vLLM).
# Usage: bash tests/gpu/learn_tiny.sh RECIPE[:VARIANT] CONTROL [RECIPE CONTROL ...]   (CONTROL: none | shuffled)
# Each pair builds its folder (tiny model, task data, warm-up on the GPU) under /tmp/learn, runs
# `python -m verl_recipes learn`, and copies learn.json, learn.png and the metrics to $OUT when it is set.
# LEARN_STAGE=build only builds the folders; LEARN_STAGE=run reuses them (a device call is 10 minutes: a slow
# run, e.g. the multi-turn tool task, can have its folders built in the call before).
set -uo pipefail
source "$(dirname "$0")/checkout_path.sh"
source "$(dirname "$0")/kit_spares.sh"
export RL_RUNS_DIR="${RL_RUNS_DIR:-/tmp/runs}"
status=0
while [ $# -ge 2 ]; do
  recipe=$1 control=$2; shift 2
  variant=""; [[ "$recipe" == *:* ]] && variant=${recipe#*:}
  name=${recipe//[:\/]/_}.$control folder=/tmp/learn/$name
  stage=${LEARN_STAGE:-all}
  if [ "$stage" != run ]; then
    rm -rf "$folder"
    python3 -m verl_recipes.learn.build "$folder" --recipe "$recipe" --control "$control" || { status=1; continue; }
    [ "$stage" = build ] && continue
  fi
  python3 -m verl_recipes learn "${recipe%%:*}" --variant "$variant" --tiny "$folder" || status=1
  if [ -n "${OUT:-}" ]; then
    run=$(ls -td "$RL_RUNS_DIR"/*-learn*/launches/*/ 2>/dev/null | head -1)
    for f in learn.json learn.png metrics.jsonl; do [ -f "$run/$f" ] && cp "$run/$f" "$OUT/$name.$f"; done
  fi
done
exit $status

#!/usr/bin/env bash
# Learning runs on the lent GPU machine (the kit in ../shared/gpu provides verl + Ray + vLLM).
# Usage: [SEED=n] bash tests/gpu/learn_tiny.sh RECIPE[:VARIANT] CONTROL [RECIPE CONTROL ...]   (CONTROL: none | shuffled | stale)
# Each pair builds its folder (tiny model, task data, warm-up on the GPU; `--seed SEED`) in a work folder of its own,
# $LEARN_WORK/<recipe>.<control>.s<SEED>.XXXXXX (default /tmp/learn) with its runs folder inside, so two copies of one
# pair on one machine never share a folder; then runs `python -m verl_recipes learn --seed SEED` and copies learn.json, learn.png and the
# metrics to $LEARN_OUT (default $OUT) as <recipe>.<control>.s<SEED>.<file>, when set. LEARN_ARGS: Hydra overrides
# of every run (e.g. LEARN_ARGS=+configs/kernels=liger, a lever's numerics); learn.json records them as `args`, and
# the tally counts such runs apart from the card's setting.
set -uo pipefail
source "$(dirname "$0")/checkout_path.sh"
source "$(dirname "$0")/kit_spares.sh"
seed=${SEED:-0} out=${LEARN_OUT:-${OUT:-}} root=${LEARN_WORK:-/tmp/learn}
status=0
mkdir -p "$root"
while [ $# -ge 2 ]; do
  recipe=$1 control=$2; shift 2
  variant=""; [[ "$recipe" == *:* ]] && variant=${recipe#*:}
  name=${recipe//[:\/]/_}.$control.s$seed
  work=$(mktemp -d "$root/$name.XXXXXX")
  echo "[learn_tiny] $recipe $control seed $seed in $work"
  python3 -m verl_recipes.learn.build "$work/tiny" --recipe "$recipe" --control "$control" --seed "$seed" \
    || { status=1; continue; }
  RL_RUNS_DIR=$work/runs python3 -m verl_recipes learn "${recipe%%:*}" --variant "$variant" --tiny "$work/tiny" \
    --seed "$seed" --args "${LEARN_ARGS:-}" || status=1
  if [ -n "$out" ]; then
    run=$(ls -d "$work"/runs/*-learn*/launches/*/ 2>/dev/null | head -1)
    for f in learn.json learn.png metrics.jsonl; do [ -f "$run/$f" ] && cp "$run/$f" "$out/$name.$f"; done
  fi
done
exit $status

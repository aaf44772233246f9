#!/usr/bin/env bash
# A recipe at its real model shape (random init) with its own settings, 3 steps on this node of G GPUs (default 4; 8 is
# the 8-GPU node smoke): `make <recipe>-node` on a lent GPU machine (the kit in ../shared/gpu provides verl + Ray +
# vLLM; Megatron recipes need its Megatron set). The model and the prompts are built on the machine, in RL_NODE_WORK
# (default /tmp/verl-node); a 30B model is 61 GB there. Copies the record written by this run
# (results/node/<recipe>[-<variant>].<hardware>.json), its metrics and the tail of verl's log to $OUT when it is set.
# Usage: bash tests/gpu/node_smoke.sh RECIPE[:VARIANT] [G [OVERRIDE ...]]  (overrides: as make's ARGS, recorded)
set -uo pipefail
source "$(dirname "$0")/checkout_path.sh"
source "$(dirname "$0")/kit_spares.sh"
export RL_RUNS_DIR="${RL_RUNS_DIR:-/tmp/runs}"
spec=${1:?usage: bash tests/gpu/node_smoke.sh RECIPE[:VARIANT] [G [OVERRIDE ...]]} gpus=${2:-4}
shift; [ $# -gt 0 ] && shift
recipe=${spec%%:*} variant=""; [[ "$spec" == *:* ]] && variant=${spec#*:}
name=$recipe${variant:+-$variant}
started=$(mktemp)  # what this run writes to results/node/ is newer than this
python3 -m verl_recipes node "$recipe" --variant "$variant" --gpus "$gpus" --args "$*"
status=$?
if [ -n "${OUT:-}" ]; then
  find results/node -maxdepth 2 -name "$name.*" -newer "$started" -exec cp {} "$OUT/" \;
  run=$(ls -td "$RL_RUNS_DIR"/*-node*/launches/*/ 2>/dev/null | head -1)
  [ -n "$run" ] && [ -f "$run/verl.log" ] && tail -c 4000000 "$run/verl.log" >"$OUT/$name.${gpus}gpu.verl.log"
fi
rm -f "$started"
exit $status

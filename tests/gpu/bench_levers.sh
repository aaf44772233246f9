#!/usr/bin/env bash
# The lever arms of issue 43 beside `ours` on one lent host, one arm per GPU, in waves that each hold an `ours`
# (verl_recipes/bench/e2e_levers.py lays them out, estimates the time from bench/results and refuses a plan that
# SECONDS do not fit; then tests/gpu/side_by_side.sh runs it). Files stay on the machine under LEVERS_OUT
# (/tmp/levers): w<wave>/e2e.<arm>.{json,metrics.jsonl,config.yaml} and w<wave>.<arm>.log.
# Usage: bash tests/gpu/bench_levers.sh SECONDS [--gpus 4] [--arms A,B] [--in-order] [--dry-run]
# On one GPU, arms compared with each other rather than each with an `ours` of its wave (2026-11-29: verl_example then
# ours_levers, in 1,054 s): bash tests/gpu/bench_levers.sh 1200 --gpus 1 --in-order --arms verl_example,ours; files in
# /tmp/levers/w1 (wait with JOB_OUT=/tmp/levers/w1 so each call brings back what has finished).
# An SGLang arm runs in SGLang's layer set (tests/gpu/with_sglang.sh): install it after the kit (tests/gpu/pack_sglang.sh's
# calls 5-6), then e.g. bash tests/gpu/bench_levers.sh 1150 --gpus 1 --in-order --arms ours_sglang,verl_example
# (ours_sglang against verl's example on one host: 501 s + the example's wall).
# Plan on 4 GPUs (--dry-run, from the committed walls: 572 s an arm, start-up included): the six levers take two
# waves: wave 1 ours, ours_no_recompute, ours_logprob_budget, ours_max_num_seqs; wave 2 ours_replay_poll, ours,
# ours_bypass, ours_colocate_async; ~1190 s of queue (Liger's arm ran on 2026-11-28 and is in `ours` since). Here
# first: `bash tests/gpu/pack_extra.sh` (liger-kernel, which ours now needs) and the kit's `CHUNK_MIB=44 bash
# ../shared/gpu/package.sh`
# (4 parts: 44 MiB and the working tree fit a 64 MiB call). Device calls,
# back to back (a machine goes back 30 s after a call), kind nvidia-h100-x4 (or nvidia-h200-x4), about 1400 device
# seconds in all:
#   1  carry .gpu/c1 .gpu/bin     bash .gpu/bin/stash.sh 1
#   2  carry .gpu/c2              bash /tmp/gpu/bin/stash.sh 2
#   3  carry .gpu/c3              bash /tmp/gpu/bin/stash.sh 3
#   4  carry .gpu/c4 .whl/extra   bash /tmp/gpu/bin/stash.sh 4 && bash /tmp/gpu/bin/install.sh &&
#        python3 -m pip install -q --no-index --no-deps --target /tmp/extra .whl/extra/*.whl &&
#        (setsid nohup bash -c "bash tests/gpu/bench_levers.sh 1300 --arms $ARMS; echo \$? > /tmp/levers.rc" \
#          > /tmp/levers.log 2>&1 &)
#        sleep 540; cat /tmp/levers.log
#   5  sleep 570; cat /tmp/levers.log
#   6  until [ -e /tmp/levers.rc ]; do sleep 10; done; cat /tmp/levers.log /tmp/levers.rc;
#        tar -czf $OUT/levers.tgz -C /tmp/levers .
set -euo pipefail
cd "$(dirname "$0")/../.."
# the plan reads the arms through verl_recipes.catalog (omegaconf, hydra): on the lent machine, the kit's verl layers
kit_env=${GPU_KIT:-/tmp/gpu}/bin/env.sh
if [ -f "$kit_env" ]; then source "$kit_env" verl; fi
exec python3 -m verl_recipes.bench.e2e_levers "$@"

#!/usr/bin/env bash
# Several jobs side by side on one lent machine, each on its own GPUs: a tiny learning run or smoke uses a sliver of
# one GPU, so a 4-GPU machine runs four in the device time of one.
# Usage: bash tests/gpu/side_by_side.sh SECONDS "GPUS NAME[@LAYERSET] command args..." ...
#   e.g. bash tests/gpu/side_by_side.sh 570 "0 text bash tests/gpu/learn_tiny.sh qwen25-7b-grpo none" \
#          "1,2 async bash tests/gpu/learn_tiny.sh qwen25-7b-grpo:separate_async none"
# Each job runs through the kit's run.sh (log NAME.log, in $OUT when set) with CUDA_VISIBLE_DEVICES=GPUS (Ray, which
# each job starts for itself, sees only those) and its own runs folder and vLLM compile cache under /tmp/side/NAME,
# so that neither the result copy nor two compilations of one model collide. @LAYERSET picks the kit's layer set
# (default all; a Megatron job needs all-tf59). Jobs start STAGGER_S (15) s apart; all
# end within SECONDS of the first start. Exit 0 when every job exits 0. GPU_KIT: the kit's folder (/tmp/gpu).
# "+GPUS NAME command" queues a job: it starts once every earlier job on any of those GPUs has ended, so one launch
# (left going in the background across device calls) keeps every GPU busy, e.g. a 1-GPU smoke then a 2-GPU arm.
# A GPU may carry a lane, "0.a": jobs on lanes 0.a and 0.b share GPU 0 side by side, and "+0.a" queues on its lane
# only. Two vLLM start-ups on one GPU can trip vLLM's memory check (results/learn/README.md, 2026-11-27).
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: side_by_side.sh SECONDS \"GPUS NAME[@LAYERSET] command args...\" ..." >&2; exit 2; }
deadline=$(( $(date +%s) + $1 )); shift
pids=()
declare -A holder  # GPU -> the pid of the latest job on it
for job in "$@"; do
  read -r gpus name cmd <<<"$job"
  layers=all; [[ "$name" == *@* ]] && { layers=${name#*@}; name=${name%@*}; }
  [ -n "${cmd:-}" ] || { echo "side_by_side.sh: job '$job' is not \"GPUS NAME command\"" >&2; exit 2; }
  after=""; [[ "$gpus" == +* ]] && { gpus=${gpus#+}; for g in ${gpus//,/ }; do after+=" ${holder[$g]:-}"; done; }
  devices=$(sed 's/\.[^,]*//g' <<<"$gpus")  # lanes dropped: 0.a,1.b -> 0,1
  mkdir -p "/tmp/side/$name"
  (
    for pid in $after; do while kill -0 "$pid" 2>/dev/null; do sleep 2; done; done
    # shellcheck disable=SC2086  # the command's words split as typed
    CUDA_VISIBLE_DEVICES=$devices RL_RUNS_DIR=/tmp/side/$name/runs VLLM_CACHE_ROOT=/tmp/side/$name/vllm \
      GPU_DEADLINE=$deadline GPU_QUIET=1 bash "${GPU_KIT:-/tmp/gpu}/bin/run.sh" "$name" "$layers" \
      "$(( deadline - $(date +%s) ))" -- $cmd
  ) &
  pids+=($!)
  for g in ${gpus//,/ }; do holder[$g]=$!; done
  [ -n "$after" ] || sleep "${STAGGER_S:-15}"
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status

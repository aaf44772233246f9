#!/usr/bin/env bash
# What the runs on a lent machine have measured so far, copied flat into $OUT, so that a lease lost mid-run still
# leaves its evidence (run 8 of results/node/README.md lost a finished step this way). Run it in every waiting call:
#   bash /tmp/repo/tests/gpu/wait.sh 560 $(cat /tmp/job.pid) LOG   (harvests every 20 s; returns when the job ends)
# Copies the node records and their history, each run's per-phase memory rows (RL_NODE_WORK's phase-memory/), each
# launch's metrics.jsonl and the last LOG_TAIL bytes (default 300 KB) of its verl.log. Names say the run:
# <job>.<recipe>.rank0.jsonl, <job>.metrics.jsonl, <job>.verl.log, <job> being the side_by_side.sh job (or "run");
# and the files of JOB_OUT, the folder a background chain writes its own logs and records to, under their names.
set -uo pipefail
out=${OUT:?harvest.sh copies into \$OUT}
repo=${REPO_COPY:-/tmp/repo} side=${SIDE_ROOT:-/tmp/side}  # side_by_side.sh keeps each job in /tmp/side/<job>
cp "$repo"/results/node/*.json "$out/" 2>/dev/null
cp "$repo"/results/node/history/*."$(date -u +%Y%m%d)"-*.json "$out/" 2>/dev/null
for rows in "${RL_NODE_WORK:-/tmp/verl-node}"/phase-memory/*/rank*.jsonl; do
  [ -f "$rows" ] || continue
  recipe=$(basename "$(dirname "$rows")")
  cp "$rows" "$out/phases.$recipe.$(basename "$rows")"
done
# the background job's own files (JOB_OUT: a chain's logs, smoke records, learn_tiny's LEARN_OUT), flat
if [ -n "${JOB_OUT:-}" ] && [ -d "$JOB_OUT" ]; then
  find "$JOB_OUT" -maxdepth 1 -type f -exec cp {} "$out/" \;
fi
for runs in "$side"/*/runs "${RL_RUNS_DIR:-/tmp/runs}"; do
  launch=$(ls -td "$runs"/*/launches/*/ 2>/dev/null | head -1)
  [ -n "$launch" ] || continue
  job=run; [[ "$runs" == "$side"/* ]] && job=$(basename "$(dirname "$runs")")
  [ -f "$launch/metrics.jsonl" ] && cp "$launch/metrics.jsonl" "$out/$job.metrics.jsonl"
  [ -f "$launch/verl.log" ] && tail -c "${LOG_TAIL:-300000}" "$launch/verl.log" >"$out/$job.verl.log"
done
exit 0

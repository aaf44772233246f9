#!/usr/bin/env bash
# A device session of the fault suite on one lent GPU, as two commands (results/faults/README.md, "Device calls"):
#   call 4 (carry .gpu/c4 .whl/extra), after the kit's parts 1-3 are stashed:
#     bash /tmp/gpu/bin/stash.sh 4 && bash tests/gpu/faults_session.sh start SECONDS FAULT[,FAULT...] [WAIT_S]
#   every later call:
#     bash /tmp/repo/tests/gpu/faults_session.sh wait [WAIT_S]
# start installs the kit and .whl/extra, seeds the suite's OUT with the committed reference record (the runs it holds
# complete are kept, faults.earlier_runs), copies the checkout to /tmp/repo (each call lays the working tree anew) and
# starts there, in the background, the colocated chain of FAULTS and then the reference job, all ending within
# SECONDS (the device time left less ~60 s for the install and the last call). wait waits for it (at most WAIT_S,
# default 540) and brings back OUT whole as faults_out.tgz (records, metrics/, logs/), so a lease lost mid-way
# keeps what was written. Here: unpack it and follow the README's "Here:" steps.
# FAULTS_ROOT (/tmp/faults), REPO_COPY (/tmp/repo), GPU_KIT (/tmp/gpu) and EXTRA_SITE (/tmp/extra) move its folders.
set -uo pipefail
root=${FAULTS_ROOT:-/tmp/faults} repo=${REPO_COPY:-/tmp/repo}
out=$root/out
wait_job() {
  # OUT unset for wait.sh: its flat harvest would bring back what the archive below holds, a second time
  cd "$repo" && OUT='' bash tests/gpu/wait.sh "${1:-540}" "$(cat "$root/job.pid")" "$root/side.log"
  cp "$root/side.log" "$out/" 2>/dev/null
  tar -czf "${OUT:?the device call sets OUT}/faults_out.tgz" -C "$root" out
}
case "${1:-}" in
  start)
    seconds=${2:?usage: faults_session.sh start SECONDS FAULTS [WAIT_S]} faults=${3:?usage: ... start SECONDS FAULTS}
    rm -rf "$repo" "$root" && mkdir -p "$repo" "$out/metrics" || exit 1
    bash "${GPU_KIT:-/tmp/gpu}/bin/install.sh" >"$root/install.log" 2>&1 || { tail -5 "$root/install.log"; exit 1; }
    python3 -m pip install -q --no-index --no-deps --target "${EXTRA_SITE:-/tmp/extra}" .whl/extra/*.whl || exit 1
    cp -a . "$repo/" && cd "$repo" || exit 1
    cp results/faults/reference.json "$out/"
    cp results/faults/metrics/*.reference.*.jsonl "$out/metrics/"
    chain="0 faults.colocated python3 tests/gpu/faults.py job qwen25-7b-grpo $faults --out $out"
    reference="+0 faults.reference python3 tests/gpu/faults.py reference qwen25-7b-grpo --out $out"
    OUT=$out setsid nohup bash tests/gpu/side_by_side.sh "$seconds" "$chain" "$reference" \
      >"$root/side.log" 2>&1 </dev/null &
    echo $! >"$root/job.pid"
    sleep 5
    wait_job "${4:-}" ;;
  wait) wait_job "${2:-}" ;;
  *) echo "usage: faults_session.sh start SECONDS FAULTS [WAIT_S] | wait [WAIT_S]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# A waiting call on the lent machine that ends when the work it waits on has ended, not when its sleep does:
#   bash /tmp/repo/tests/gpu/wait.sh SECONDS PID [LOG]
# Every POLL_S (default 20) it runs harvest.sh (what the runs measured so far, into $OUT) and checks PID, the
# background job started with `setsid nohup ... & echo $! > /tmp/job.pid`. It returns as soon as PID is gone, or
# after SECONDS (under the call's limit), printing which and LOG's last TAIL_LINES (default 30) lines. On 2026-11-29 a
# chain died at once on a missing environment and a plain `sleep` loop held the machine 520 s for nothing.
# JOB_OUT: the folder the job writes its own files to (harvest.sh copies them too).
set -uo pipefail
seconds=${1:?usage: wait.sh SECONDS PID [LOG]} pid=${2:?usage: wait.sh SECONDS PID [LOG]} log=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
poll=${POLL_S:-20}
end=$((SECONDS + seconds))
state="still running after ${seconds} s"
alive() {  # a zombie (ended, its parent has not reaped it yet) counts as ended
  kill -0 "$1" 2>/dev/null && [ "$(sed -E 's/^.*\) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]  # after "(comm) "
}
while :; do
  [ -n "${OUT:-}" ] && bash "$here/harvest.sh"
  if ! alive "$pid"; then
    state="ended after ${SECONDS} s"
    break
  fi
  [ "$SECONDS" -lt "$end" ] || break
  sleep "$poll"
done
echo "[wait] pid $pid $state"
# a call brings back at most OUT_FILES (8) files of $OUT (the device tool's limit): more go back as one archive, so
# no evidence is left behind (2026-11-29: a failed smoke's log did not come back beside eight other files)
if [ -n "${OUT:-}" ] && [ "$(find "$OUT" -type f | wc -l)" -gt "${OUT_FILES:-8}" ]; then
  archive=$(mktemp /tmp/harvest.XXXXXX.tgz)
  tar -czf "$archive" -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv "$archive" "$OUT/harvest.tgz"
  echo "[wait] more than ${OUT_FILES:-8} files: all of them in \$OUT/harvest.tgz"
fi
[ -n "$log" ] && [ -f "$log" ] && tail -n "${TAIL_LINES:-30}" "$log"
exit 0

#!/usr/bin/env bash
# Runs a command in SGLang's layer set (tests/gpu/pack_sglang.sh env): a job of tests/gpu/side_by_side.sh in the kit's
# layer set `none`, e.g. the e2e arm ours_sglang queued by tests/gpu/bench_levers.sh beside the vLLM arms.
#   bash tests/gpu/with_sglang.sh command args...
set -euo pipefail
eval "$(bash "$(dirname "$0")/pack_sglang.sh" env)"
exec "$@"

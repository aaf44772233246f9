#!/usr/bin/env bash
# How long one of a run's processes takes to import what it imports, from the kit's layers (installed without
# bytecode, `pip --no-compile`): cold, again (bytecode written by the first, unless the machine forbids it), and after
# compiling the layers ahead (`compileall`). Every process of a tiny launch imports these serially, and a launch took
# 206-234 s on an H100 on 2026-12-08, of which a few seconds trained (results/faults/logs).
#   bash tests/gpu/import_time.sh [LAYERSET]      (after the kit's install.sh)
set -uo pipefail
source "${GPU_KIT:-/tmp/gpu}/bin/env.sh" "${1:-all}"
layers=${GPU_KIT:-/tmp/gpu}/root/layers
IMPORTS='import torch, transformers, ray, vllm, verl.trainer.main_ppo, vllm.v1.engine.core'
env | grep -E '^PYTHON' | grep -v '^PYTHONPATH='
python3 -c 'import sys; print("dont_write_bytecode:", sys.flags.dont_write_bytecode, sys.version.split()[0])'
pycs() { find "$layers" -name '*.pyc' | wc -l; }
TIMEFORMAT='%R s'
echo "pyc files in the layers: $(pycs)"
for attempt in cold again; do
  echo -n "import ($attempt): "; { time python3 -c "$IMPORTS" >/dev/null 2>&1; } 2>&1
  echo "pyc files in the layers: $(pycs)"
done
echo -n "compileall -j 0 of the layers: "; { time python3 -m compileall -q -j 0 "$layers" >/dev/null 2>&1; } 2>&1
echo "pyc files in the layers: $(pycs)"
echo -n "import (compiled): "; { time python3 -c "$IMPORTS" >/dev/null 2>&1; } 2>&1

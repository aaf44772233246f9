#!/usr/bin/env bash
# Pack the Megatron wheel set (the OUT_DIR of tests/gpu/build_transformer_engine.sh) into one xz archive that fits a
# single call to the lent GPU machine (< 50 MiB; ~34 MB), beside the GPU kit of ../shared/gpu (README: "Megatron on
# the GPU machine").
#   bash tests/gpu/pack_megatron.sh WHEELS_DIR ARCHIVE
# On the GPU machine: mkdir -p /tmp/meg && xz -dc ARCHIVE | tar -x -C /tmp/meg, then PYTHONPATH=$PWD:/tmp/meg
# before the kit's `run.sh NAME all-tf59 ...` (megatron-bridge 0.5.1 runs on verl's transformers 5.9.0, layer T).
# Two cuts make it fit, both for that machine only (a user's node installs requirements/gpu-megatron*.txt instead):
# - TE's core library keeps the kernels of sm_90 (H100/H200) only: the others are zeroed in place by the kit's
#   megatron/fatbin_prune.py (offsets unchanged, so the library still loads; zeros compress to nothing);
# - pulp keeps its x86-64 Linux CBC solver only.
set -euo pipefail
WHEELS=$(realpath "${1:?usage: pack_megatron.sh WHEELS_DIR ARCHIVE}")
ARCHIVE=$(realpath -m "${2:?usage: pack_megatron.sh WHEELS_DIR ARCHIVE}")
PRUNE=${PRUNE:-$(dirname "$0")/../../../shared/gpu/megatron/fatbin_prune.py}
LIMIT=$((50 * 1024 * 1024))
ROOT=$(mktemp -d)/megroot
trap 'rm -rf "$(dirname "$ROOT")"' EXIT

# the cp312 wheels into one folder for PYTHONPATH, by a Python 3.12 (megatron-bridge asks for >=3.12,<3.13)
PY312=${PY312:-$(ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)}
"${PY312:-python3.12}" -m pip install -q --no-deps --no-index --target "$ROOT" "$WHEELS"/*.whl
core=$(find "$ROOT" -name libtransformer_engine.so)
python3 "$PRUNE" "$core" "$core.pruned" 90 && mv "$core.pruned" "$core"
find "$ROOT/pulp/solverdir/cbc" -mindepth 1 -maxdepth 2 -type d ! -path '*/linux' ! -path '*/linux/i64' -exec rm -rf {} +
rm -rf "$ROOT/bin"  # console scripts with this machine's interpreter path
find "$ROOT" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$(dirname "$ARCHIVE")"
tar -C "$ROOT" -cf - . | xz -9 -T2 > "$ARCHIVE"
size=$(stat -c %s "$ARCHIVE")
echo "$ARCHIVE: $size bytes ($(du -sh "$ROOT" | cut -f1) unpacked); $(ls "$ROOT" | grep -c dist-info) packages"
[ "$size" -lt "$LIMIT" ] || { echo "over the 50 MiB a call carries" >&2; exit 1; }

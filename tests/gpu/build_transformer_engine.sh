#!/usr/bin/env bash
# Build TransformerEngine's PyTorch extension (transformer-engine-torch, source only on PyPI) as a cp312 wheel for
# the lent GPU machine (Python 3.12, torch 2.11.0+cu130, Hopper sm_90), on a CPU machine with CUDA 13's nvcc and a
# Python 3.12 (pyenv), then collect every wheel Megatron on verl 0.9.1 needs there.
#   bash tests/gpu/build_transformer_engine.sh OUT_DIR [WORK_DIR]
# Versions: TE 2.20.2 (core: transformer-engine-cu13, the newest with a CUDA 13 wheel; megatron-core 0.18.0 asks for
# transformer-engine[core_cu13,pytorch] unpinned), megatron-core 0.18.0, mbridge 0.15.1 (requirements/gpu-megatron.txt).
# Timings and results of the last run: tests/gpu/BUILD_TE.md.
set -euo pipefail
OUT=$(realpath -m "${1:?usage: build_transformer_engine.sh OUT_DIR [WORK_DIR]}")
WORK=$(realpath -m "${2:-/tmp/te-build}")
# a real Python 3.12 (a pyenv shim named python3.12 may refuse to run outside its pyenv version)
PY312=${PY312:-$(ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)}
PY312=${PY312:-$(command -v python3.12)}
TE=2.20.2
mkdir -p "$OUT" "$WORK"
stamp() { echo "[$(date +%H:%M:%S)] $*"; }

stamp "venv ($PY312)"
[ -x "$WORK/venv/bin/python" ] || "$PY312" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install -q --upgrade pip setuptools wheel
stamp "torch 2.11.0 and TE core $TE (headers and libtransformer_engine.so)"
"$PY" -m pip install -q "torch==2.11.0" "transformer-engine-cu13==$TE" pybind11 ninja packaging "nvidia-cudnn-cu13" \
  "nvidia-mathdx" einops onnxscript
"$PY" - <<'PYEOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda)
assert torch.version.cuda and torch.version.cuda.startswith("13"), "need a CUDA 13 build of torch to match cu130"
PYEOF

stamp "source of transformer-engine-torch $TE"
if [ ! -f "$WORK/te_torch.tar.gz" ]; then
  url=$(curl -fsS https://pypi.org/simple/transformer-engine-torch/ | grep -o "https://[^\"#]*transformer_engine_torch-$TE.tar.gz" | head -1)
  curl -fsSL -o "$WORK/te_torch.tar.gz" "$url"
fi
rm -rf "$WORK/src" && mkdir -p "$WORK/src" && tar xzf "$WORK/te_torch.tar.gz" -C "$WORK/src" --strip-components=1

stamp "build (sm_90 only, MAX_JOBS=${MAX_JOBS:-2})"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} NVTE_FRAMEWORK=pytorch NVTE_CUDA_ARCHS=90 TORCH_CUDA_ARCH_LIST=9.0
export MAX_JOBS=${MAX_JOBS:-2} NVTE_BUILD_THREADS_PER_JOB=1
start=$(date +%s)
(cd "$WORK/src" && "$PY" -m pip wheel -v --no-build-isolation --no-deps . -w "$OUT") > "$WORK/build.log" 2>&1 || {
  tail -40 "$WORK/build.log"; stamp "build FAILED after $(( $(date +%s) - start )) s (log: $WORK/build.log)"; exit 1; }
stamp "built in $(( $(date +%s) - start )) s"

stamp "runtime wheels the GPU machine lacks"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
  -d "$OUT" "transformer-engine-cu13==$TE" "transformer-engine==$TE" "megatron-core==0.18.0" "mbridge==0.15.1" \
  "nvidia-mathdx" || true
ls -la "$OUT"
for so in $(cd "$WORK" && unzip -o -q "$OUT"/transformer_engine_torch-*.whl -d "$WORK/check" && find "$WORK/check" -name "*.so"); do
  echo "== $so"; readelf -d "$so" | grep NEEDED
done
stamp done

#!/usr/bin/env bash
# Build TransformerEngine's PyTorch extension (transformer-engine-torch 2.20.2, source only on PyPI) as a cp312 wheel
# for a GPU node with Python 3.12 and torch 2.11.0 (CUDA 13), then download the rest of the Megatron set of
# requirements/gpu-megatron.txt as cp312 manylinux_2_28 wheels, all into OUT_DIR.
#   bash tests/gpu/build_transformer_engine.sh OUT_DIR [WORK_DIR]
# The extension is plain C++ against torch and TE's headers: no nvcc, no GPU; 11-21 min on one core (MAX_JOBS=1).
# It needs a CUDA 13 toolkit's headers at CUDA_HOME (default /usr/local/cuda). The cuSPARSE, cuDNN and NCCL headers a
# toolkit subset may lack come from torch's own NVIDIA wheels: NVTE_BUILD_USE_NVIDIA_WHEELS=1 makes TE read them
# (without it the build stops at `cusparse.h: No such file`). For another torch, set TORCH_SPEC (the extension is
# bound to the torch it was built against). tests/gpu/pack_megatron.sh packs OUT_DIR for the lent GPU machine.
set -euo pipefail
OUT=$(realpath -m "${1:?usage: build_transformer_engine.sh OUT_DIR [WORK_DIR]}")
WORK=$(realpath -m "${2:-/tmp/te-build}")
# a real Python 3.12 (a pyenv shim named python3.12 may refuse to run outside its pyenv version)
PY312=${PY312:-$(ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)}
PY312=${PY312:-$(command -v python3.12)}
TORCH_SPEC=${TORCH_SPEC:-torch==2.11.0}
TE=2.20.2
# the runtime wheels the GPU machine lacks; versions as in requirements/gpu-megatron.txt
RUNTIME=("transformer-engine-cu13==$TE" "transformer-engine==$TE" megatron-core==0.18.2 megatron-bridge==0.5.1
         nvidia-modelopt==0.44.0 pulp==3.3.2 tensorboard==2.21.0 absl-py==2.5.1 nvdlfw-inspect==0.2.2)
mkdir -p "$OUT" "$WORK"
stamp() { echo "[$(date +%H:%M:%S)] $*"; }

stamp "venv ($PY312) with $TORCH_SPEC"
[ -x "$WORK/venv/bin/python" ] || "$PY312" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install -q --upgrade pip wheel
"$PY" -m pip install -q "$TORCH_SPEC" "setuptools<82" pybind11 ninja packaging  # torch 2.11 asks setuptools<82

stamp "source of transformer-engine-torch $TE"
if [ ! -f "$WORK/te_torch.tar.gz" ]; then
  # not `pip download`: preparing the sdist's metadata would install torch again in an isolated build env
  url=$(curl -fsS https://pypi.org/simple/transformer-engine-torch/ | grep -o "https://[^\"#]*transformer_engine_torch-$TE.tar.gz" | head -1)
  curl -fsSL -o "$WORK/te_torch.tar.gz" "$url"
fi
rm -rf "$WORK/src" && mkdir -p "$WORK/src" && tar xzf "$WORK/te_torch.tar.gz" -C "$WORK/src" --strip-components=1

stamp "build (sm_90, MAX_JOBS=${MAX_JOBS:=1})"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export CPATH=$CUDA_HOME/include NVTE_FRAMEWORK=pytorch NVTE_CUDA_ARCHS=90 NVTE_WITH_NCCL_EP=0 \
  NVTE_BUILD_USE_NVIDIA_WHEELS=1 NVTE_PYTORCH_FORCE_BUILD=TRUE MAX_JOBS
start=$(date +%s)
(cd "$WORK/src" && "$PY" -m pip wheel -v --no-build-isolation --no-deps . -w "$OUT") > "$WORK/build.log" 2>&1 || {
  tail -40 "$WORK/build.log"; stamp "build FAILED after $(( $(date +%s) - start )) s (log: $WORK/build.log)"; exit 1; }
stamp "built in $(( $(date +%s) - start )) s"

stamp "runtime wheels: ${RUNTIME[*]}"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$OUT" "${RUNTIME[@]}"
ls -la "$OUT"
stamp done

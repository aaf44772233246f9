#!/usr/bin/env bash
# The small pure-Python wheels our GPU runs need beside the kit of ../shared/gpu, into .whl/extra (git-ignored),
# carried in the kit's last call: `carry [.gpu/c4, .whl/extra]` (4 parts with CHUNK_MIB=44), then on the GPU machine
#   python3 -m pip install -q --no-index --no-deps --target /tmp/extra .whl/extra/*.whl
# which tests/gpu/kit_spares.sh puts on PYTHONPATH. Pins as requirements/gpu.txt and cpu.txt name them:
# - math-verify, latex2sympy2_extended: the math rewards grade with them (in the reward workers);
# - gguf: verl_recipes/models.py reads SmolLM2-135M-Instruct's GGUF with it;
# - liger-kernel: configs/kernels/liger (Triton kernels; the GPU machine's torch brings Triton).
#   bash tests/gpu/pack_extra.sh [DEST]
set -euo pipefail
DEST=${1:-.whl/extra}
WHEELS=(math-verify==0.9.0 latex2sympy2_extended==1.11.0 gguf==0.19.0 liger-kernel==0.8.2)
mkdir -p "$DEST"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$DEST" "${WHEELS[@]}"
echo "pack_extra: $(ls "$DEST"/*.whl | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST"

#!/usr/bin/env bash
# The SGLang layer set for the lent GPU machine (issue 46): SGLang 0.5.12 and what it needs beside the GPU kit of
# ../shared/gpu, packed as the kit packs its layers (pip --target per layer, trimmed, tar + xz, split into parts that
# the kit's stash.sh and install.sh take) into .gpu/sglang/ (git-ignored with .gpu/).
#   bash tests/gpu/pack_sglang.sh [pack]     this machine: download (cached), trim, pack; prints the calls it takes
#   bash tests/gpu/pack_sglang.sh env        GPU machine: the exports of an SGLang run, for eval (below)
#   bash tests/gpu/pack_sglang.sh check      GPU machine: nvcc, a C++ compiler, libnuma, and the imports of the rollout
#   bash tests/gpu/pack_sglang.sh prune SO   zero the kernels of GPUs other than sm_90 in libraries, in place
#   bash tests/gpu/pack_sglang.sh list       the wheel list
# A user's GPU node installs requirements/gpu-sglang.txt instead; this is that set, cut to what the lent machine lacks.
# Knobs: SGLANG_PACK_CACHE (~/.cache/gpu-kit-sglang: wheels, archive; a re-run with the same list only re-splits),
# CHUNK_MIB (48), XZ_THREADS (cores, at most 4), FORCE=1 (rebuild the archive), PIP_INDEX_URL.
#
# What travels. The kit (its calls 1-3) brings verl + Ray (layers R, S), vLLM's server modules (X; watchfiles is
# SGLang's too) and verl's transformers 5.9.0 + tokenizers 0.22.2 (T). SGLang runs put those on PYTHONPATH, not the
# kit's layer V (vLLM, with its own xgrammar, openai and llguidance pins). This set adds:
#   G    SGLang 0.5.12, sglang-kernel 0.4.2.post2, flashinfer 0.6.11.post1 and the rest of requirements/gpu-sglang.txt's
#        closure that the machine lacks, always on PYTHONPATH, in front;
#   Z    spares, one folder each: generic packages the machine most likely has (its image is not listed in full);
#        `env` adds one only where the machine cannot import its module, so no run pays a retry for it;
#   lib  libnuma.so.1 from this machine, where it has one: sgl_kernel's libraries link it, and `env` puts it on
#        LD_LIBRARY_PATH only where the GPU machine lacks it.
# Left out: what a dense bf16 text or image model on one Hopper GPU does not import (SGLang imports these inside
# functions, or in modules that its model registry skips when they fail):
#   tilelang + z3-solver + ml-dtypes (DeepSeek NSA/V4 kernels), tokenspeed-mla + tokenspeed-triton (an MLA backend),
#   nvidia-cutlass-dsl + libs-base, quack-kernels (CuTe-DSL kernels: Blackwell, linear attention, diffusion;
#   flashinfer guards these imports), flash-attn-4 (requirements/gpu-sglang.txt says why), scipy (diffusion),
#   av + torchcodec (video decoding; torchcodec also needs FFmpeg's libraries), modelscope, blobfile, mistral_common,
#   smg-grpc-* (gRPC server), the grammar backends other than the default xgrammar (llguidance; outlines with
#   interegular, lark, diskcache, airportsdata), nvidia-cudnn-frontend (flashinfer's cuDNN decode); verl's loggers and
#   test tools (wandb, tensorboard, pytest), build tools, and Ray's dashboard extras (opencensus, google-*), which the
#   kit leaves out as well.
# Trimmed after install, as the kit trims vLLM:
#   - every CUDA library keeps its sm_90 kernels only; the others are zeroed in place, offsets unchanged, so the library
#     still loads (as the kit's megatron/fatbin_prune.py); H100/H200 only. sgl_kernel's FA3 library (SGLang's vision
#     attention on Hopper) is 1.07 GB with sm80/86/90 builds, 471 MB of them sm_90: 45 MB of the archive;
#   - flashinfer-cubin's cubins (Blackwell trtllm-gen kernels and FP8 DeepGEMM, 1.5 GB): the package stays, empty;
#   - mscclpp's and xgrammar's static libraries and headers; debug info is stripped.
# Checked on this CPU machine (2026-11-27): with G, the kit's T R S X and the spares a Python 3.12 + torch 2.11.0
# environment lacks, sglang's engine, HTTP server, scheduler, tokenizer manager, model runner, CUDA-graph runner,
# the flashinfer, FA3 and triton attention backends, vision attention, the Qwen2 and Qwen2.5-VL models, the xgrammar
# backend and verl 0.9.1's sglang_rollout modules all import (sgl_kernel's libraries loaded against a stand-in libcuda).
#
# On the GPU machine (2 x H200, 2026-11-28), calls 4 and 5 took 28 s with the install (1.5 GB in 3 s); `check` found
# nvcc, c++, ninja and a system libnuma, and imported the rollout (sglang 0.5.12, sglang-kernel 0.4.2.post2, flashinfer
# 0.6.11.post1, transformers 5.9.0 and verl 0.9.1 on sm_90). A first text smoke (tests/gpu/smoke_tiny.sh with
# SMOKE_ARGS="configs/rollout=sglang") started verl's SGLang server in hybrid mode and captured its 36 CUDA graphs
# (the first 53 s: flashinfer compiling its kernels), 3.7 min after the smoke began; the call's time ran out there.
# On 1 x H200, 2026-11-29 (calls 1-6 took 76 s, `check` included), the tiny smokes below ran one after another:
# qwen25-7b-grpo PASS (400 s, 5 min to the first step), qwen25-vl-7b-geo3k-dapo FAIL at the first weight sync (SGLang's
# Qwen2.5-VL loader wants checkpoint names: verl_recipes/runtime/checkpoint_names.py), retool-qwen25-7b PASS (472 s).
# On 1 x H200, 2026-11-29, 12:49-13:16 UTC (calls 1-6 as below, then a chain of three): the VL smoke FAIL again, at its
# first request (verl sends SGLang's server a pixel budget it cannot take: verl_recipes/runtime/sglang_pixel_budget.py),
# then qwen25-7b-grpo's learning run PASS (444 s) and its shuffled control PASS (355 s).
# On 1 x H200, 2026-12-01 (calls 1-6 in 30 s once the machine was up): the VL smoke FAIL a third time, in SGLang's
# vision tower (transformers 5.9's rotary embedding: verl_recipes/runtime/sglang_models/), then the e2e arm ours_sglang
# (510 s); in a second lease, tests/gpu/sglang_vl_check.py PASS (without the package the engine died as the smoke did,
# 66 s; with it the image request was answered, 129 s).
# Measured 2026-11-27 on a 2-core machine (6.5 to 14 min, most of it xz -9): 102 wheels of 787 MiB (G: 58, 769.5 MiB,
# of them flashinfer-cubin 344.2 and sglang-kernel 307.4; Z: 44, 17.9 MiB) install to 3.0 GB; trimmed, G is 1.5 GB
# (578 MB of it zeroed kernels) and Z 51 MB; the archive is 94.0 MiB (98,617,732 bytes; FA3's sm_90 kernels 45 MB of
# it), in 2 parts of 48.0 and 46.1 MiB: 2 device calls after the kit's 4 (CHUNK_MIB=44), 6 in all, 12 s to unpack (here).
#
# Device calls, back to back on one machine (the kit's README: a released machine loses /tmp; start again at 1). Each
# call carries its part plus the working tree (git ls-files: 10.2 MiB on 2026-11-27) within 64 MiB; the pack's report
# warns when a part and the tree no longer fit (then CHUNK_MIB=40, one part more). The kit's parts need the same care.
#   1  carry .gpu/c1 .gpu/bin     bash .gpu/bin/stash.sh 1
#   2  carry .gpu/c2              bash /tmp/gpu/bin/stash.sh 2
#   3  carry .gpu/c3              bash /tmp/gpu/bin/stash.sh 3
#   4  carry .gpu/c4              bash /tmp/gpu/bin/stash.sh 4 && bash /tmp/gpu/bin/install.sh
#   5  carry .gpu/sglang/c1       GPU_HOME=/tmp/sgl GPU_DIR=.gpu/sglang bash /tmp/gpu/bin/stash.sh 1
#   6  carry .gpu/sglang/c2       GPU_HOME=/tmp/sgl GPU_DIR=.gpu/sglang bash /tmp/gpu/bin/stash.sh 2 && \
#                                 GPU_HOME=/tmp/sgl bash /tmp/gpu/bin/install.sh && bash tests/gpu/pack_sglang.sh check
#   7, ... your runs, with your git-ignored assets in carry:
#        eval "$(bash tests/gpu/pack_sglang.sh env)" && bash /tmp/gpu/bin/run.sh NAME none 500 -- your command
#      (layer set none: the PYTHONPATH from env is the set; run.sh keeps it in front). The kit's spares (layers/Z of
#      /tmp/gpu) still retry on "No module named"; tests/gpu/kit_spares.sh adds the four our runs always need.
#      A recipe's tiny smoke on SGLang (allow 8 minutes: 400-470 s on 1 x H200, 2026-11-29, 5 of them start-up):
#        eval "$(bash tests/gpu/pack_sglang.sh env)" && bash /tmp/gpu/bin/run.sh sgl_text none 500 -- env \
#          SMOKE_ARGS=configs/rollout=sglang bash tests/gpu/smoke_tiny.sh qwen25-7b-grpo /tmp/tiny_sgl
#      Several smokes outlast a call: in call 6, copy the tree to /tmp/repo (tar without .gpu, .whl, .git, .venv),
#      write a chain (`cd /tmp/repo; eval "$(bash tests/gpu/pack_sglang.sh env)"; export OUT=/tmp/lo LOGDIR=/tmp/lo;`
#      then one run.sh line per smoke), start it with `(env -u OUT setsid nohup bash /tmp/chain.sh > /tmp/lo/chain.log
#      2>&1 & echo $! > /tmp/job.pid)`, and wait in this call and the next ones, each issued at once:
#        cd /tmp/repo && JOB_OUT=/tmp/lo bash tests/gpu/wait.sh 540 $(cat /tmp/job.pid) /tmp/lo/chain.log
#      (three smokes' files are more than a call brings back: wait.sh packs them into harvest.tgz).
# verl 0.9.1 picks SGLang's flashinfer attention backend for sglang >= 0.5.12 (async_sglang_server.py: FA3's CUDA-graph
# capture is broken there), and SGLang samples with flashinfer: both compile their kernels on first use, which needs
# nvcc and a C++ compiler (`check` says whether the machine has them). Without them, run with
#   +actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton
#   +actor_rollout_ref.rollout.engine_kwargs.sglang.sampling_backend=pytorch
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# LAYER name==version, cp312 manylinux x86-64; resolved 2026-11-27 from requirements/gpu-sglang.txt (+ sglang 0.5.12
# without its dependencies) for CPython 3.12, less what the GPU machine and the kit provide
wheels() {
  cat <<'EOF'
G sglang==0.5.12
G sglang_kernel==0.4.2.post2
G flashinfer_python==0.6.11.post1
G flashinfer_cubin==0.6.11.post1
G sgl_deep_gemm==0.1.0
G apache_tvm_ffi==0.1.9
G torch_c_dlpack_ext==0.1.5
G cuda_python==13.4.4
G cuda_bindings==13.4.4
G cuda_core==1.2.2
G cuda_pathfinder==1.9.1
G cuda_tile==1.7.0
G nvidia_ml_py==13.615.71
G ninja==1.13.2
G tabulate==0.10.0
G xgrammar==0.2.0
G openai==2.6.1
G openai_harmony==0.0.4
G anthropic==2.14.0
G httpx2==2.16.2
G httpcore2==2.16.2
G truststore==0.10.5
G docstring_parser==0.18.0
G compressed_tensors==0.20.0
G loguru==0.7.3
G torchao==0.17.0
G torch_memory_saver==0.0.10
G torchaudio==2.11.0
G soundfile==0.13.1
G kernels==0.14.1
G kernels_data==0.16.2
G tomlkit==0.15.2
G timm==1.0.16
G gguf==0.19.0
G pybase64==1.5.1
G partial_json_parser==0.2.1.1.post7
G uvloop==0.23.0
G setproctitle==1.3.8
G python_multipart==0.0.34
G easydict==1.14
G ipython==9.18.1
G ipython_pygments_lexers==1.1.1
G jedi==0.20.1
G parso==0.8.7
G traitlets==5.16.1
G prompt_toolkit==3.0.53
G wcwidth==0.9.4
G stack_data==0.6.3
G executing==2.3.0
G asttokens==3.0.2
G pure_eval==0.2.4
G matplotlib_inline==0.2.2
G pexpect==4.9.0
G ptyprocess==0.7.0
G mathruler==0.1.0
G qwen_vl_utils==0.0.14
G pylatexenc==2.11
G nvtx==0.2.17
Z pygments==2.21.0
Z pillow==13.0.0
Z sentencepiece==0.2.3
Z tiktoken==0.14.0
Z einops==0.8.2
Z protobuf==7.36.2
Z msgpack==1.2.4
Z cloudpickle==3.1.3
Z click==8.5.1
Z jiter==0.19.0
Z distro==1.9.0
Z sniffio==1.3.1
Z anyio==4.16.0
Z httpx==0.28.1
Z httpcore==1.0.9
Z h11==0.16.0
Z aiohttp==3.14.5
Z aiohappyeyeballs==2.7.1
Z aiosignal==1.4.0
Z frozenlist==1.8.0
Z multidict==7.2.1
Z propcache==0.5.4
Z yarl==1.25.1
Z attrs==26.1.0
Z requests==2.34.2
Z urllib3==2.8.0
Z idna==3.20
Z certifi==2026.10.19.post1
Z charset_normalizer==3.5.3
Z cffi==2.1.1
Z pycparser==3.12
Z prometheus_client==0.26.0
Z xxhash==4.1.0
Z typer==0.29.2
Z rich==15.0.0
Z markdown_it_py==4.3.0
Z mdurl==0.1.2
Z shellingham==1.5.4
Z nest_asyncio==1.6.0
Z platformdirs==4.14.8
Z importlib_metadata==10.2.0
Z lazy_importer==0.1.0
Z zipp==4.1.2
Z tzdata==2026.6
EOF
}

# zero the fatbin entries of GPUs other than sm_90 in an ELF library, in place (offsets unchanged). A fatbin (one per
# compiled source) with an sm_90 cubin keeps only that; one without keeps its PTX for sm_90 and below, which the
# driver compiles for sm_90 at load. Reads the ELF section table itself (no readelf needed).
prune() {
  python3 - "$@" <<'PYEOF'
import mmap, struct, sys
KEEP = 90
for path in sys.argv[1:]:
    with open(path, "r+b") as f:
        if f.read(4) != b"\x7fELF":
            continue
        m = mmap.mmap(f.fileno(), 0)
        shoff, = struct.unpack_from("<Q", m, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", m, 0x3A)
        sec = lambda i: struct.unpack_from("<IIQQQQ", m, shoff + i * shentsize)  # name, type, flags, addr, offset, size
        stroff = sec(shstrndx)[4]
        kept = zeroed = 0
        for i in range(shnum):
            name, _, _, _, off, size = sec(i)
            if m[stroff + name:stroff + name + 11] != b".nv_fatbin\0":
                continue
            p, end_sec = off, off + size
            while p + 16 <= end_sec:
                magic, _, hsz, fsz = struct.unpack_from("<IHHQ", m, p)
                if magic != 0xBA55ED50:
                    p += 8
                    continue
                entries, q, end = [], p + hsz, p + hsz + fsz
                while q < end:
                    kind, _, ehsz, esz = struct.unpack_from("<HHIQ", m, q)
                    arch, = struct.unpack_from("<I", m, q + 28)
                    entries.append((kind, arch, q + ehsz, esz))
                    q += ehsz + esz
                has90 = any(k == 2 and a == KEEP for k, a, _, _ in entries)
                for kind, arch, start, n in entries:
                    keep = (kind == 2 and arch == KEEP) if has90 else (kind == 1 and arch <= KEEP)
                    if keep:
                        kept += n
                    else:
                        m[start:start + n] = bytes(n)
                        zeroed += n
                p = end
        m.flush()
        m.close()
        if kept or zeroed:
            print(f"prune {path}: kept {kept / 1e6:.1f} MB, zeroed {zeroed / 1e6:.1f} MB")
PYEOF
}

# GPU machine: the exports of an SGLang run, for eval: PYTHONPATH (any set before, then G, the kit's T R S X, then each
# spare whose module the machine lacks), PATH (G's ninja last) and, where the machine has no libnuma.so.1, LD_LIBRARY_PATH
exports() {
  local L=${SGLANG_HOME:-/tmp/sgl}/root/layers K=${GPU_KIT:-/tmp/gpu}/root/layers
  [ -d "$L/G" ] || { echo "pack_sglang.sh: $L/G is missing; stash and install the SGLang parts first" >&2; exit 1; }
  [ -d "$K/R" ] || { echo "pack_sglang.sh: $K/R is missing; stash and install the kit's parts first" >&2; exit 1; }
  PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$L/G:$K/T:$K/R:$K/S:$K/X" python3 - "$L/Z" <<'PYEOF'
import importlib.util, os, shlex, sys
z, p = sys.argv[1], os.environ["PYTHONPATH"]
for line in open(z + "/MAP"):
    mod, folder = line.split()
    if importlib.util.find_spec(mod) is None and z + "/" + folder not in p.split(":"):
        p += ":" + z + "/" + folder
print("export PYTHONPATH=" + shlex.quote(p))
PYEOF
  printf 'export PATH=%q\n' "$PATH:$L/G/bin"   # ninja, after the machine's own tools
  if [ -e "$L/lib/libnuma.so.1" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\.1 '; then
    printf 'export LD_LIBRARY_PATH=%q\n' "$L/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
}

# GPU machine, after install: what the runs depend on beyond the packages, then the rollout's imports
check() {
  local t
  eval "$(exports)"
  for t in nvcc c++ ninja; do echo "check: $t: $(command -v "$t" || echo missing)"; done
  echo "check: libnuma.so.1: $(ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\.1 ' && echo system || echo "carried ($L/lib)")"
  python3 -c "
import importlib.metadata as md, torch
for m in ['sgl_kernel', 'sgl_kernel.flash_attn', 'flashinfer', 'sglang.srt.entrypoints.engine',
          'sglang.srt.managers.scheduler', 'verl.workers.rollout.sglang_rollout.async_sglang_server']:
    __import__(m)
print('check: imports ok;', torch.cuda.get_device_name(0), 'sm_%d%d' % torch.cuda.get_device_capability(0),
      ', '.join(n + ' ' + md.version(n) for n in ['sglang', 'sglang-kernel', 'flashinfer-python', 'transformers', 'verl']))
"
}

case "${1:-pack}" in
  list) wheels; exit 0 ;;
  prune) shift; prune "$@"; exit 0 ;;
  env) exports; exit 0 ;;
  check) L=${SGLANG_HOME:-/tmp/sgl}/root/layers; check; exit 0 ;;
  pack) ;;
  *) echo "usage: pack_sglang.sh [pack|env|check|prune SO...|list]" >&2; exit 2 ;;
esac

# ---- pack (this machine): needs python3 with pip, PyPI (or PIP_INDEX_URL), tar, xz, split, sha256sum; strip optional
REPO=$(git -C "$HERE" rev-parse --show-toplevel)
DEST=$REPO/.gpu/sglang
CACHE=${SGLANG_PACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-kit-sglang}
CHUNK_MIB=${CHUNK_MIB:-48}   # + the working tree, within the 64 MiB a call carries
XZ_THREADS=${XZ_THREADS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}
INDEX=${PIP_INDEX_URL:-https://pypi.org/simple}
FORMAT=3   # bump when the install or trim steps change, so that a cached archive is rebuilt
PLAT=(--python-version 3.12 --implementation cp --platform linux_x86_64 --platform manylinux1_x86_64
      --platform manylinux2010_x86_64 --platform manylinux2014_x86_64)
for v in $(seq 5 35); do PLAT+=(--platform "manylinux_2_${v}_x86_64"); done   # pip does not imply the older glibc tags
T0=$(date +%s)
say() { echo "[pack_sglang $(( $(date +%s) - T0 ))s] $*"; }
mkdir -p "$CACHE/wheels" "$CACHE/build"
LIST=$CACHE/build/wheels.txt
LOG=$CACHE/build/pip.log; : > "$LOG"
pip_q() { python3 -m pip "$@" >>"$LOG" 2>&1 || { tail -20 "$LOG"; echo "pack_sglang.sh: pip $1 failed (log: $LOG)" >&2; exit 1; }; }
wheels > "$LIST"
norm() { echo "$1" | tr 'A-Z.-' 'a-z__'; }
cached() {  # the cached wheel of name==version, or nothing
  local n v f; n=$(norm "${1%%==*}"); v=${1#*==}
  for f in "$CACHE"/wheels/*.whl; do
    [ -e "$f" ] || continue
    f=$(basename "$f"); [ "$(norm "${f%%-*}")" = "$n" ] && [ "$(echo "$f" | cut -d- -f2)" = "$v" ] && echo "$CACHE/wheels/$f" && return
  done
}

KEY=$( (cat "$LIST"; echo "format=$FORMAT") | sha256sum | cut -c1-16)
ARCHIVE=$CACHE/build/sglang-$KEY.tar.xz
if [ "${FORCE:-0}" = 1 ] || [ ! -s "$ARCHIVE" ]; then
  # 1. download what the cache lacks
  missing=$(awk '{print $2}' "$LIST" | while read -r req; do [ -n "$(cached "$req")" ] || echo "$req"; done)
  if [ -n "$missing" ]; then
    say "downloading $(echo "$missing" | wc -l) wheels into $CACHE/wheels"
    # shellcheck disable=SC2086
    pip_q download -q --no-deps --only-binary=:all: "${PLAT[@]}" --index-url "$INDEX" -d "$CACHE/wheels" $missing
  fi
  # 2. install the cp312 wheels (whatever python3 runs pip): G into one folder, each spare into Z/<name>,
  #    Z/MAP "import-name folder" as in the kit
  STAGE=$CACHE/build/stage; rm -rf "$STAGE"; mkdir -p "$STAGE/layers/Z"; : > "$STAGE/layers/Z/MAP"
  mapfile -t g < <(awk '$1=="G"{print $2}' "$LIST" | while read -r req; do cached "$req"; done)
  pip_q install -q --no-deps --no-index --no-compile --ignore-requires-python --only-binary=:all: "${PLAT[@]}" --target "$STAGE/layers/G" "${g[@]}"
  awk '$1=="Z"{print $2}' "$LIST" | while read -r req; do
    n=$(norm "${req%%==*}")
    pip_q install -q --no-deps --no-index --no-compile --ignore-requires-python --only-binary=:all: "${PLAT[@]}" \
      --target "$STAGE/layers/Z/$n" "$(cached "$req")"
    for e in "$STAGE/layers/Z/$n"/*; do
      b=$(basename "$e"); case "$b" in *.dist-info|__pycache__|*.pth|bin) continue;; esac
      echo "${b%%.*} $n" >> "$STAGE/layers/Z/MAP"
    done
  done
  # console scripts name this machine's python: drop them, and keep the binaries (ninja, which flashinfer's JIT runs)
  rm -rf "$STAGE"/layers/Z/*/bin
  for f in "$STAGE"/layers/G/bin/*; do [ -f "$f" ] && [ "$(head -c2 "$f")" = '#!' ] && rm -f "$f"; done
  numa=$(ldconfig -p 2>/dev/null | awk '/libnuma\.so\.1 .*x86-64/{print $NF; exit}')
  if [ -n "$numa" ]; then mkdir -p "$STAGE/layers/lib" && cp -L "$numa" "$STAGE/layers/lib/libnuma.so.1"
  else say "warning: no libnuma.so.1 here to carry; the GPU machine must have its own (sgl_kernel links it)"; fi
  cp "$LIST" "$STAGE/layers/sglang-wheels.txt"
  say "installed: $(du -sh "$STAGE/layers/G" | cut -f1) G, $(du -sh "$STAGE/layers/Z" | cut -f1) Z"
  # 3. trim (see the header)
  G=$STAGE/layers/G
  rm -rf "$G"/flashinfer_cubin/cubins/*                       # Blackwell trtllm-gen kernels, FP8 DeepGEMM
  rm -rf "$G"/include "$G"/lib/*.a "$G"/xgrammar/lib/*.a      # mscclpp's and xgrammar's headers and static libraries
  find "$STAGE/layers" -name '*.so*' -type f -print0 | xargs -0 -r bash "$HERE/pack_sglang.sh" prune
  if command -v strip >/dev/null; then
    find "$STAGE/layers" -name '*.so*' -type f -exec strip --strip-debug {} + 2>/dev/null || true
  fi
  find "$STAGE/layers" -name __pycache__ -prune -exec rm -rf {} +
  say "trimmed: $(du -sh "$G" | cut -f1) G, $(du -sh "$STAGE/layers/Z" | cut -f1) Z; compressing (xz -9 -T$XZ_THREADS)"
  # 4. pack
  rm -f "$CACHE"/build/sglang-*.tar.xz
  tar -C "$STAGE" -cf - layers | xz -9 -T"$XZ_THREADS" -c > "$ARCHIVE.tmp"
  mv "$ARCHIVE.tmp" "$ARCHIVE"
  rm -rf "$STAGE"
else
  say "archive cached ($ARCHIVE); FORCE=1 rebuilds it"
fi

# 5. split into .gpu/sglang/cN with the kit's MANIFEST format (stash.sh and install.sh read it)
rm -rf "$DEST"; mkdir -p "$DEST"
split -b "${CHUNK_MIB}M" -d -a 2 "$ARCHIVE" "$DEST/part."
n=0
for p in "$DEST"/part.*; do n=$((n + 1)); mkdir -p "$DEST/c$n"; mv "$p" "$DEST/c$n/"; done
{
  echo "archive_sha256 $(sha256sum "$ARCHIVE" | cut -d' ' -f1)"
  echo "archive_bytes $(stat -c %s "$ARCHIVE")"
  echo "parts $n"
  (cd "$DEST" && sha256sum c*/part.*)
} > "$DEST/MANIFEST"
for i in $(seq 1 "$n"); do cp "$DEST/MANIFEST" "$DEST/c$i/MANIFEST"; done
cp "$LIST" "$DEST/wheels.txt"

# 6. report: each call's load is its part plus the working tree, out of the 64 MiB a call carries
tree=$(cd "$REPO" && git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null | awk '{s+=$1} END{print s+0}')
say "archive $(awk -v b="$(stat -c %s "$ARCHIVE")" 'BEGIN{printf "%.1f MiB", b/1048576}'): $n parts, one device call each, after the kit's 3"
for i in $(seq 1 "$n"); do
  b=$(du -sb "$DEST/c$i" | cut -f1)
  awk -v i="$i" -v b="$b" -v t="$tree" 'BEGIN{m=1048576; printf "  .gpu/sglang/c%s  %5.1f MiB (+ working tree %.1f MiB = %.1f MiB of 64)\n", i, b/m, t/m, (b+t)/m}'
  [ $(( b + tree )) -lt $(( 63 * 1048576 )) ] || echo "  WARNING: call $i would carry over 63 MiB; CHUNK_MIB=$(( CHUNK_MIB - 8 )) makes more, smaller parts"
done
echo "calls: $(( n + 3 )) in all (kit 3 + SGLang $n); the sequence is in this script's header"

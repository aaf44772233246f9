# Sourced by the GPU scripts: puts on PYTHONPATH the kit's spares (../shared/gpu, layers/Z) that our runs always
# need, and the wheels installed with `pip install --target /tmp/extra` (math-verify and latex2sympy2_extended travel
# beside the kit). The kit adds a missing spare only after a failed try, one per try, each try a full start-up: a
# VL run missing two spared a whole device call.
# - mathruler, pylatexenc: the math rewards grade non-numeric answers with them (in the reward workers);
# - qwen_vl_utils: verl's VL data path; blake3: vLLM hashes images with it;
# - setproctitle: vLLM titles its processes (VLLM::EngineCore, ...) only when it imports, as on a user's node (a
#   vLLM requirement); the supervisor and tests/gpu/faults.py find vLLM's roles by those titles.
spares=${GPU_KIT:-/tmp/gpu}/root/layers/Z
for spare in mathruler pylatexenc qwen_vl_utils blake3 setproctitle; do
  [ -d "$spares/$spare" ] && PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$spares/$spare"
done
extra=${EXTRA_SITE:-/tmp/extra}
[ -d "$extra" ] && PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
# The lent machine sets PYTHONDONTWRITEBYTECODE=1 and the kits install without bytecode (pip --no-compile), so every
# process of a run compiled each module it imported: a worker's imports took 22.0 s, 18.0 s once compiled, and
# compiling a kit's layers took 3.4 s (one sample each: bench/results/import_time.h100.2026-12-08.txt); a tiny launch
# starts about eight such processes one after another. Once per install (install.sh replaces root/, marker included);
# jobs side by side may compile at once, which is safe (each .pyc is written to a temporary file and renamed).
for layers in $(tr ':' '\n' <<<"$PYTHONPATH" | sed -n 's#^\(.*/root/layers\)/.*#\1#p' | sort -u); do
  [ -e "$layers/.compiled" ] || { python3 -m compileall -q -j 0 "$layers" >/dev/null 2>&1; touch "$layers/.compiled"; }
done

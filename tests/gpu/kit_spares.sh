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

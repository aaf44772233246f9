#!/bin/bash
# Run a command in the recipe environment of this node, from the repo root (recipe.sbatch wraps every srun step
# in it): source $RL_NODE_ENV when set (module load, conda or venv activation, HF_TOKEN, NCCL_SOCKET_IFNAME ...),
# else the repo's .venv when there is one; a container image that already has everything needs neither.
set -eo pipefail  # no -u: activation scripts read unset variables
if [[ -n "${RL_NODE_ENV:-}" ]]; then
  # shellcheck disable=SC1090
  source "$RL_NODE_ENV"
elif [[ -f .venv/bin/activate ]]; then
  source .venv/bin/activate
fi
exec "$@"

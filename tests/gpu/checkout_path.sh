# Sourced by the GPU scripts: makes this checkout importable as the installed package is, without pip (the lent GPU
# machine has no network and no install of ours). rewards/ and agents/ install as verl_recipes.rewards and
# verl_recipes.agents (pyproject package-dir), so a plain PYTHONPATH=$PWD would not find them: a folder of links lays
# verl_recipes/ out as the install does, and goes first on PYTHONPATH (Ray workers inherit it). One folder per shell:
# runs started side by side (one per GPU) must not remove each other's.
root=/tmp/checkout_path.$$
rm -rf "$root" && mkdir -p "$root/verl_recipes"
for entry in "$PWD"/verl_recipes/*; do ln -s "$entry" "$root/verl_recipes/"; done
ln -s "$PWD/rewards" "$root/verl_recipes/rewards"
ln -s "$PWD/agents" "$root/verl_recipes/agents"
# and the package's entry points, as pip would record them: verl loads its `verl.plugins` (the per-run weight-push
# sockets, verl_recipes/runtime/weight_push_socket.py) from the installed metadata
info="$root/verl_recipes-0.1.0.dist-info"
mkdir -p "$info" && printf 'Metadata-Version: 2.1\nName: verl-recipes\nVersion: 0.1.0\n' >"$info/METADATA"
awk '/^\[project\.entry-points\./ { group = $0; sub(/^\[project\.entry-points\./, "", group); gsub(/["\]]/, "", group)
       print "[" group "]"; on = 1; next }
     /^\[/ { on = 0 }
     on && NF && !/^#/ { gsub(/"/, ""); print }' "$PWD/pyproject.toml" >"$info/entry_points.txt"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
# `python -m` and `python script.py` put the checkout (or the script's folder) first on sys.path, where verl_recipes/
# has no rewards/: Python 3.11+ leaves them out with PYTHONSAFEPATH, so the link folder wins
export PYTHONSAFEPATH=1

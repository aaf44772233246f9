"""scripts/slurm/recipe.sbatch under stand-ins for srun, scontrol and make: what every step is started with. The
cluster runs Ray's token authentication with a token of the job's own, which the steps and make's job submission
inherit and which is gone when the job ends (a live token-mode cluster is proven in tests/test_cluster.py)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from verl_recipes.catalog import REPO

SBATCH = REPO / "scripts/slurm/recipe.sbatch"
# each step logs its command and what it sees of the token; a `ray start --block` step lives until the job stops it;
# `wait-nodes` returns once every node's `ray start` has logged, as the real one waits for the nodes to join (without
# it, a loaded machine let the job end and kill the worker's step before that step had logged: 1 start of 2)
SRUN = """#!/bin/bash
token=${RAY_AUTH_TOKEN_PATH:-}
mode=$( [ -n "$token" ] && [ -f "$token" ] && stat -c %a "$token" )
echo "srun $* | RAY_AUTH_MODE=${RAY_AUTH_MODE:-} path=$token mode=$mode token=$( [ -n "$token" ] && cat "$token" )" >> "$STEPS_LOG"
case "$*" in
  *"ray start"*--block*) exec sleep 60 ;;
  *wait-nodes*"--nodes "*) all="$*"; nodes=${all##*--nodes }; nodes=${nodes%% *}
    for _ in $(seq 200); do [ "$(grep -c 'ray start' "$STEPS_LOG")" -ge "$nodes" ] && break; sleep 0.05; done ;;
esac
"""
SCONTROL = "#!/bin/bash\necho n1\necho n2\n"


def run_sbatch(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name, body in (("srun", SRUN), ("scontrol", SCONTROL)):
        (stubs / name).write_text(body)
        (stubs / name).chmod(0o755)
    log = tmp_path / "steps.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SLURM_"))}
    done = subprocess.run(["bash", str(SBATCH), "qwen25-7b-grpo", "VARIANT=x"], cwd=REPO, capture_output=True,
                          text=True, timeout=60,
                          env=base | {"PATH": f"{stubs}{os.pathsep}{base['PATH']}", "STEPS_LOG": str(log),
                                      "SLURM_JOB_ID": "424242", "SLURM_JOB_NODELIST": "n[1-2]",
                                      "SLURM_SUBMIT_DIR": str(REPO), "RAY_HEAD_IP": "10.0.0.1", **env})
    return done, log.read_text().splitlines() if log.exists() else []


def test_the_cluster_starts_in_token_mode_with_a_token_of_its_own_that_ends_with_the_job(tmp_path):
    done, steps = run_sbatch(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    own = REPO / ".ray-token-424242"
    starts = [s for s in steps if "ray start" in s]
    assert len(starts) == 2 and any("--head" in s for s in starts)  # head and one worker
    used = [s for s in steps if "ray start" in s or "make qwen25-7b-grpo" in s or "wait-nodes" in s]
    assert len(used) == 4, steps
    for step in used:
        assert f"RAY_AUTH_MODE=token path={own} mode=600 token=" in step, step
    tokens = {step.rsplit("token=", 1)[1] for step in used}
    assert len(tokens) == 1 and len(tokens.pop()) == 32  # 16 random bytes, hex
    assert "make qwen25-7b-grpo CLUSTER=http://10.0.0.1:8265 VARIANT=x" in " ".join(steps)
    assert not own.exists()  # removed when the job ended


def test_a_token_file_of_the_user_is_used_and_kept(tmp_path):
    token = tmp_path / "token"
    token.write_text("f" * 32)
    token.chmod(stat.S_IRUSR | stat.S_IWUSR)
    done, steps = run_sbatch(tmp_path, RAY_AUTH_TOKEN_PATH=str(token))
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(f"path={token} mode=600 token={'f' * 32}" in s for s in steps if "ray start" in s)
    assert token.exists() and not (REPO / ".ray-token-424242").exists()


def test_an_empty_token_file_is_refused_before_any_node_starts(tmp_path):
    empty = tmp_path / "empty"
    empty.touch()
    done, steps = run_sbatch(tmp_path, RAY_AUTH_TOKEN_PATH=str(empty))
    assert done.returncode == 2
    assert f"RAY_AUTH_TOKEN_PATH={empty} holds no token" in done.stderr
    assert not [s for s in steps if "ray start" in s]

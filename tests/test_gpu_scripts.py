"""The GPU checks of tests/gpu/, collected by pytest: on a CUDA machine they run (each writes its JSON to a scratch
$OUT); on CPU-only machines they skip with the reason (tests/conftest.py). The CPU halves of the same code paths are
tests/test_freeze_vision.py, tests/test_calibrate_fsdp.py and tests/test_calibrate_log_prob.py."""

import os
import subprocess
import sys

import pytest

from verl_recipes.catalog import REPO

# learn_reruns.py and faults.py are launchers (SECONDS of runs across a host's GPUs), not checks
LAUNCHERS = {"learn_reruns.py", "faults.py"}
SCRIPTS = sorted(p.name for p in (REPO / "tests" / "gpu").glob("*.py") if p.name not in LAUNCHERS)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_gpu_script_passes(script, tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    done = subprocess.run([sys.executable, str(REPO / "tests" / "gpu" / script)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert any(tmp_path.iterdir()), f"{script} wrote no result to $OUT"

"""Two runs on one host get their own weight-push sockets (verl_recipes/runtime/weight_push_socket.py): verl loads
the module through its plugin entry point, the launcher gives each launch its own id, and both ends of the push
(sender and receiver, built in different processes) name the same per-run path. On a GPU node the same is checked on
verl's own classes; two learning runs side by side on one host are the end-to-end proof (results/learn/README.md)."""

import os
import subprocess
import sys
import textwrap

import pytest
import tomllib

from verl_recipes.catalog import REPO
from verl_recipes.launch import run_env
from verl_recipes.runtime import weight_push_socket as wps

VERL_PATH = "ipc:///tmp/rl-colocate-zmq-01000000-replica-0-rank-0.sock"


@pytest.mark.parametrize("handle, run_id, expected", [
    (VERL_PATH, "ab12cd34ef56", "ipc:///tmp/rl-colocate-zmq-ab12cd34ef56-01000000-replica-0-rank-0.sock"),
    (VERL_PATH, None, VERL_PATH),  # no launcher: verl's own path
    (VERL_PATH, "", VERL_PATH),
    ("ipc:///tmp/rl-colocate-zmq-ab12cd34ef56-01000000-replica-0-rank-0.sock", "ab12cd34ef56",
     "ipc:///tmp/rl-colocate-zmq-ab12cd34ef56-01000000-replica-0-rank-0.sock"),  # never twice
    ("tcp://127.0.0.1:5555", "ab12cd34ef56", "tcp://127.0.0.1:5555"),  # another kind of handle
])
def test_run_path(handle, run_id, expected):
    assert wps.run_path(handle, run_id) == expected


def test_each_launch_has_its_own_run_id(tmp_path):
    first, second = run_env(tmp_path)[wps.RUN_ID_ENV], run_env(tmp_path)[wps.RUN_ID_ENV]
    assert first != second and len(first) == 12


# verl's two classes as bucketed_weight_transfer.py defines them (the handle is the first argument), in a module that
# is imported only after the hook is installed, as verl's is in a worker
FAKE = '''
class BucketedWeightSender:
    def __init__(self, zmq_handle, bucket_size_mb=512, use_shm=False):
        self.zmq_handle = zmq_handle

class BucketedWeightReceiver:
    def __init__(self, zmq_handle, device=None, use_shm=False):
        self.zmq_handle = zmq_handle
'''


def run_python(code: str, tmp_path, run_id: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != wps.RUN_ID_ENV}
    env.update({"PYTHONPATH": f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}"})
    if run_id:
        env[wps.RUN_ID_ENV] = run_id
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


ENDS = f'''
    from verl_recipes.runtime import weight_push_socket as wps
    wps.install("fake_transfer")
    import fake_transfer
    sender = fake_transfer.BucketedWeightSender({VERL_PATH!r})
    receiver = fake_transfer.BucketedWeightReceiver(zmq_handle={VERL_PATH!r}, device="cpu")
    print(sender.zmq_handle, receiver.zmq_handle)
'''


def test_both_ends_of_a_run_name_one_path_and_two_runs_two(tmp_path):
    (tmp_path / "fake_transfer.py").write_text(FAKE)
    ends = {run_id: run_python(ENDS, tmp_path, run_id).split() for run_id in ("aaaaaaaaaaaa", "bbbbbbbbbbbb", None)}
    assert ends["aaaaaaaaaaaa"] == [wps.run_path(VERL_PATH, "aaaaaaaaaaaa")] * 2
    assert ends["bbbbbbbbbbbb"] == [wps.run_path(VERL_PATH, "bbbbbbbbbbbb")] * 2
    assert ends[None] == [VERL_PATH] * 2


@pytest.mark.slow
def test_verl_loads_the_hook_at_import_without_importing_vllm(tmp_path):
    out = run_python('''
        import sys, verl
        hooked = [f.name for f in sys.meta_path if type(f).__name__ == "AfterImport"]
        print("verl.workers.rollout.vllm_rollout.bucketed_weight_transfer" in hooked, "vllm" in sys.modules,
              "sglang" in sys.modules)
    ''', tmp_path, None)
    assert out == "True False False", out  # the plugins wait for the engines' modules, and import neither


def test_the_gpu_checkout_path_declares_the_entry_point(tmp_path):
    """tests/gpu/checkout_path.sh lays the checkout out as the install does, entry point included: the lent GPU
    machine has no pip install of ours, and without it verl would not load the hook there."""
    script = f'source tests/gpu/checkout_path.sh && {sys.executable} -c "' \
             'import importlib.metadata as m, os; root = os.environ[\'PYTHONPATH\'].split(os.pathsep)[0]; ' \
             'print([e.value for d in m.distributions(path=[root]) for e in d.entry_points if e.group == \'verl.plugins\'])"'
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    declared = list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["verl.plugins"].values())
    assert "verl_recipes.runtime.weight_push_socket" in declared
    assert done.stdout.strip() == str(declared), done.stdout + done.stderr  # every plugin, in pyproject.toml's order


@pytest.mark.gpu
def test_verls_own_sender_and_receiver_take_the_run_path(tmp_path):
    out = run_python(f'''
        import torch, verl
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver, BucketedWeightSender
        print(BucketedWeightSender({VERL_PATH!r}).zmq_handle,
              BucketedWeightReceiver({VERL_PATH!r}, torch.device("cuda", 0)).zmq_handle)
    ''', tmp_path, "cccccccccccc")
    assert out.split() == [wps.run_path(VERL_PATH, "cccccccccccc")] * 2

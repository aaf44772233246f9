"""The stale-weights fault (verl_recipes/runtime/faults.py), which the learning runs' stale control injects to prove
that the agreement gates catch a weight push that stops reaching the rollout: every push after the first hands vLLM
the first push's weights again, and nothing changes without the variable."""

import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch

from verl_recipes.runtime import faults
from verl_recipes.runtime.weight_push_socket import MODULE


class Receiver:
    """verl's BucketedWeightReceiver.receive_weights as the fault sees it: buckets of (name, tensor) handed to a
    callback, the bucket's memory reused for the next one."""

    pushes: list[list[list[tuple[str, torch.Tensor]]]] = []

    def receive_weights(self, on_bucket_received):
        buckets = self.pushes.pop(0)
        for i, bucket in enumerate(buckets):
            on_bucket_received(bucket, i == len(buckets) - 1)
            for _, tensor in bucket:
                tensor.fill_(-1.0)  # the shared buffer, overwritten by the next bucket


def push(value: float) -> list[list[tuple[str, torch.Tensor]]]:
    return [[("a", torch.full((2,), value)), ("b", torch.full((3,), value))], [("c", torch.full((1,), value))]]


def test_every_push_after_the_first_loads_the_first_again():
    module = types.SimpleNamespace(BucketedWeightReceiver=type("R", (Receiver,), {}))
    faults.patch(module)
    faults.patch(module)  # once only
    module.BucketedWeightReceiver.pushes = [push(1.0), push(2.0), push(3.0)]
    loaded = []
    receiver = module.BucketedWeightReceiver()
    for _ in range(3):
        loaded.append({})
        receiver.receive_weights(lambda weights, is_last: loaded[-1].update({n: t.tolist() for n, t in weights}))
    assert loaded == [{"a": [1.0] * 2, "b": [1.0] * 3, "c": [1.0]}] * 3


def _hooks(env: dict) -> str:
    code = textwrap.dedent(f'''
        import sys, verl
        finder = next(f for f in sys.meta_path if type(f).__name__ == "AfterImport" and f.name == {MODULE!r})
        print(sorted(t.__module__.rsplit(".", 1)[1] for t in finder.thens))
    ''')
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


@pytest.mark.slow  # two interpreters importing verl: 8 s
def test_verl_loads_the_fault_only_when_asked():
    env = {k: v for k, v in os.environ.items() if k != faults.FAULT_ENV}
    assert _hooks(env) == "['weight_push_socket']"
    assert _hooks({**env, faults.FAULT_ENV: faults.STALE_WEIGHTS}) == "['faults', 'weight_push_socket']"

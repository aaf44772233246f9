"""One weight-push socket per run, so that two verl runs on one host cannot read each other's weights.

verl 0.9.1's colocated weight sync sends each bucket of weights over a ZMQ socket named
`/tmp/rl-colocate-zmq-{ray job id}-replica-{r}-rank-{k}.sock` (sender `vllm_rollout.py:141`, receiver
`utils.py:431`), and the sender removes any file of that name before it binds (`bucketed_weight_transfer.py:172`).
Every run that starts its own Ray cluster has job id 01000000, so two runs on one host bind the same path and one
run's vLLM workers receive the other's buckets: `TypeError: 'str' object is not callable` in `rebuild_ipc`, then a
trainer that waits forever (4 x H200, 2026-11-27; results/learn/README.md).

verl loads this module in every process that imports verl (the `verl.plugins` entry point in pyproject.toml):
the driver, every Ray worker and the vLLM workers, which import verl for their worker extension. It adds the run's
id to both ends' socket path where the sender and the receiver are built (`BucketedWeightSender` and
`BucketedWeightReceiver`), once verl's module that holds them is imported (verl_recipes/runtime/after_import.py).
The id comes from RUN_ID_ENV, which the launcher sets (verl_recipes/launch.py run_env) and every process of the
run's Ray cluster inherits. Without it (a job submitted to a shared Ray cluster, whose jobs have ids of their own,
or plain verl) the paths stay verl's.
"""

from __future__ import annotations

import os

from verl_recipes.runtime.after_import import after_import

RUN_ID_ENV = "VERL_RECIPES_RUN_ID"
MODULE = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
PREFIX = "ipc:///tmp/rl-colocate-zmq-"


def run_path(handle: str, run_id: str | None) -> str:
    """verl's socket path with the run's id after the prefix; unchanged without an id or for another kind of path."""
    if not run_id or not handle.startswith(PREFIX) or handle.startswith(f"{PREFIX}{run_id}-"):
        return handle
    return f"{PREFIX}{run_id}-{handle[len(PREFIX):]}"


def with_run_path(init):
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.zmq_handle = run_path(self.zmq_handle, os.environ.get(RUN_ID_ENV))

    __init__.__wrapped__ = init
    return __init__


def patch(module) -> None:
    for name in ("BucketedWeightSender", "BucketedWeightReceiver"):
        cls = getattr(module, name)
        if not hasattr(cls.__init__, "__wrapped__"):
            cls.__init__ = with_run_path(cls.__init__)


def install(name: str = MODULE, then=patch) -> None:
    after_import(name, then)


install()

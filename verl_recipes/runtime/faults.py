"""Faults injected on purpose, so that a learning run proves its gates catch them (`build --control stale`).

VERL_RECIPES_FAULT=stale_weights: each vLLM worker keeps the weights of its first weight push and, on every later
push, loads those again instead of the trainer's new ones. The rollout then samples a policy the trainer has left
behind, which is what a weight sync that silently stops reaching the rollout does; the train/rollout agreement gates
must fail (verl_recipes/learn/gates.py). It re-loads rather than drops the later pushes: a colocated vLLM that frees
its weights while it sleeps gets them back from the push, and without one it would sample from freed memory. The
copy doubles the weights' memory on the rollout's GPU: a fault for tiny models.

verl loads this module in every process (the `verl.plugins` entry point in pyproject.toml); without the variable it
does nothing.
"""

from __future__ import annotations

import os

from verl_recipes.runtime.after_import import after_import
from verl_recipes.runtime.weight_push_socket import MODULE

FAULT_ENV = "VERL_RECIPES_FAULT"
STALE_WEIGHTS = "stale_weights"


def first_push_again(receive):
    """BucketedWeightReceiver.receive_weights that hands the callback the first push's tensors on every push."""
    first: dict[str, object] = {}

    def receive_weights(self, on_bucket_received):
        def stale(weights, is_last):
            for name, tensor in weights:
                if name not in first:  # a copy: the bucket's memory is reused for the next bucket
                    first[name] = tensor.clone()
            on_bucket_received([(name, first[name]) for name, _ in weights], is_last)

        return receive(self, stale)

    receive_weights.__wrapped__ = receive
    return receive_weights


def patch(module) -> None:
    cls = module.BucketedWeightReceiver
    if not hasattr(cls.receive_weights, "__wrapped__"):
        cls.receive_weights = first_push_again(cls.receive_weights)


def install(name: str = MODULE) -> None:
    after_import(name, patch)


if os.environ.get(FAULT_ENV) == STALE_WEIGHTS:
    install()

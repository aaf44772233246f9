"""How often verl's V1 replay buffer looks for finished rollouts: every POLL_ENV seconds instead of 2.0.

verl 0.9.1's V1 trainer (main_ppo's default) waits for a step's rollouts in ReplayBuffer.sample, which checks the
transfer queue, and when too few groups are finished sleeps `poll_interval` seconds before it looks again
(trainer/ppo/v1/replay_buffer.py). The trainer never passes one, so it is the constructor's 2.0 s, and every
generation's time is rounded up to the next 2 s: the tiny learning runs logged `timing_s/gen` of 2.07, 4.08 or 6.10 s
and nothing between (results/learn): about 1 s lost a step on average, a seventh of a tiny run's 7 s step. A check
is one `kv_list` of the transfer queue, 0.09 ms at its controller (the controller's own log, 2026-11-28), so five
checks a second cost next to nothing.

verl loads this module in every process (the `verl.plugins` entry point in pyproject.toml); the trainer's process
builds the buffer. Without the variable it does nothing; configs/perf/replay_poll sets it for a run's Ray workers.
A poll_interval that verl's caller passes itself is kept.
"""

from __future__ import annotations

import inspect
import os

from verl_recipes.runtime.after_import import after_import

POLL_ENV = "VERL_RECIPES_REPLAY_POLL_S"
MODULE = "verl.trainer.ppo.v1.replay_buffer"
MARK = "_polls_every"


def polling(init, seconds: float):
    """ReplayBuffer.__init__ that sets poll_interval to `seconds` unless its caller gave one."""
    signature = inspect.signature(init)

    def wrapped(self, *args, **kwargs):
        given = "poll_interval" in signature.bind(self, *args, **kwargs).arguments
        init(self, *args, **kwargs)
        if not given:
            self.poll_interval = seconds

    setattr(wrapped, MARK, seconds)
    return wrapped


def patch(module) -> None:
    try:
        seconds = float(os.environ[POLL_ENV])
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"{POLL_ENV}={os.environ[POLL_ENV]!r}: the replay buffer's poll interval must be a number of "
                         f"seconds > 0 (configs/perf/replay_poll sets 0.2)")
    cls = module.ReplayBuffer  # ReplayBufferAsync (separate_async) inherits its __init__
    if not hasattr(cls.__init__, MARK):
        cls.__init__ = polling(cls.__init__, seconds)


if os.environ.get(POLL_ENV):
    after_import(MODULE, patch)

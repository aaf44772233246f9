"""The replay buffer's poll (verl_recipes/runtime/replay_poll.py, configs/perf/replay_poll): verl's own V1 replay
buffer, built on CPU, waits the fragment's interval between its looks at the transfer queue instead of 2.0 s, and keeps
one its caller passes. That verl loads the patch only when the variable is set: tests/test_faults.py, beside the
fault's."""

import types

import pytest
from omegaconf import OmegaConf

from verl_recipes import catalog
from verl_recipes.compose import compose
from verl_recipes.runtime import replay_poll

ARGS = {"trainer_config": OmegaConf.create({}), "max_off_policy_threshold": None, "max_off_policy_strategy": "drop",
        "sampler_kwargs": OmegaConf.create({})}


@pytest.fixture(scope="module")
def rb():
    """verl's replay buffer module: its import pulls in verl's V1 trainer (5 s), so only the tests that build one."""
    return pytest.importorskip("verl.trainer.ppo.v1.replay_buffer")


def patched(monkeypatch, rb, seconds: str) -> types.SimpleNamespace:
    """verl's buffers, subclassed so the patch stays off the real classes."""
    monkeypatch.setenv(replay_poll.POLL_ENV, seconds)
    sync = type("Sync", (rb.ReplayBuffer,), {})
    module = types.SimpleNamespace(ReplayBuffer=sync, ReplayBufferAsync=type("Async", (rb.ReplayBufferAsync, sync), {}))
    replay_poll.patch(module)
    return module


@pytest.mark.slow  # verl's V1 trainer imported
def test_the_buffer_waits_the_set_interval_between_looks(monkeypatch, rb):
    module = patched(monkeypatch, rb, "0.2")
    buffer = module.ReplayBuffer(trainer_mode="sync", **ARGS)
    slept = []
    monkeypatch.setattr(rb.time, "sleep", slept.append)
    buffer._wait_for_next_poll("train", 0.0)  # what sample() calls while too few groups are finished
    assert buffer.poll_interval == 0.2 and slept == [0.2]
    assert module.ReplayBufferAsync(trainer_mode="separate_async", **ARGS).poll_interval == 0.2
    assert rb.ReplayBuffer(trainer_mode="sync", **ARGS).poll_interval == 2.0  # verl's default, unpatched


@pytest.mark.slow  # verl's V1 trainer imported
def test_a_poll_interval_the_caller_passes_is_kept(monkeypatch, rb):
    module = patched(monkeypatch, rb, "0.2")
    assert module.ReplayBuffer(trainer_mode="sync", poll_interval=1.5, **ARGS).poll_interval == 1.5
    init = module.ReplayBuffer.__init__
    replay_poll.patch(module)  # loaded twice in one process: wrapped once
    assert module.ReplayBuffer.__init__ is init


@pytest.mark.parametrize("seconds", ["0", "-1", "soon"])
def test_a_bad_interval_names_the_variable(monkeypatch, seconds):
    monkeypatch.setenv(replay_poll.POLL_ENV, seconds)
    with pytest.raises(ValueError, match=replay_poll.POLL_ENV):  # before it touches verl's class
        replay_poll.patch(types.SimpleNamespace())


def test_the_fragment_hands_the_variable_to_every_ray_worker():
    cfg = compose(catalog.parse("qwen25-7b-grpo/v1"), ["+configs/perf=replay_poll"])
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert float(env[replay_poll.POLL_ENV]) > 0

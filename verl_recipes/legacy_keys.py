"""What an override of an older upstream script is called in verl 0.9.1, or why it has no 0.9.1 equivalent.

`python -m verl_recipes extract` translates every override of a cited script through these two tables; a key that
is in neither and not in 0.9.1's schema stops the extraction, naming the key, so a new legacy key gets a line here
(with its evidence) instead of disappearing. Sources: ../shared guide verl-0.9.1.md, findings 1 and 3, and the
0.9.1 wheel where named.
"""

from __future__ import annotations

# old key or prefix (ending in ".") -> its 0.9.1 name: main_ppo 0.9.1 ignores or rejects the old form
RENAMED = {
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.reward_kwargs.": "reward.reward_kwargs.",
    "reward_model.overlong_buffer.": "reward.reward_kwargs.overlong_buffer_cfg.",
    "custom_reward_function.": "reward.custom_reward_function.",
    # a deprecated alias, copied into fsdp_config only when > 1 (workers/config/actor.py:297-329)
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size":
        "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size":
        "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size",
    "actor_rollout_ref.actor.optim.override_optimizer_config.use_precision_aware_optimizer":
        "actor_rollout_ref.actor.optim.use_precision_aware_optimizer",
}

# key or prefix -> why 0.9.1 has nothing that means it
NO_EQUIVALENT = {
    "actor_rollout_ref.actor.megatron.grad_offload": "removed between verl 0.9.0 and 0.9.1 (0.9.1 rejects it); "
                                                     "grads leave the GPU with megatron.optimizer_offload",
    "actor_rollout_ref.ref.megatron.grad_offload": "removed between verl 0.9.0 and 0.9.1 (0.9.1 rejects it)",
    "actor_rollout_ref.rollout.moe_tensor_parallel_size": "trtllm only: verl 0.9.1 asserts so for any other rollout "
                                                          "(workers/config/rollout.py:299), and the script runs vllm",
    "trainer.tensorboard_dir": "read by no verl 0.9.1 code (the tensorboard logger reads TENSORBOARD_DIR)",
    "trainer.rl_logging_board_dir": "read by no verl 0.9.1 code",
}


def _match(key: str, table: dict[str, str]) -> tuple[str, str] | None:
    for old, value in table.items():
        if key == old or (old.endswith(".") and key.startswith(old)):
            return old, value
    return None


def translate(key: str) -> tuple[str | None, str | None]:
    """(0.9.1 key, None), or (None, why there is none). A key 0.9.1 still calls the same comes back unchanged."""
    renamed = _match(key, RENAMED)
    if renamed:
        old, new = renamed
        return (new + key[len(old):] if old.endswith(".") else new), None
    dropped = _match(key, NO_EQUIVALENT)
    if dropped:
        return None, dropped[1]
    return key, None

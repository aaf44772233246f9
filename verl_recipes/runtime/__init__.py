"""What verl's Ray workers import by name from a recipe's config, besides the rewards (top-level rewards/, installed as
`verl_recipes.rewards`) and the agent tools (agents/, `verl_recipes.agents`): the vision-freeze hook
(`actor_rollout_ref.model.external_lib`), the attention and log-prob hooks and the node check; and what verl loads by
itself, through the `verl.plugins` entry point: the per-run weight-push sockets, the injected faults and the node runs'
measurements (per-phase allocator peaks, vLLM's preemptions), the replay buffer's poll, and an SGLang rollout's
checkpoint names and pixel budget. A cluster job ships this folder, rewards/ and agents/ and nothing else of the
repository, so nothing here may import the rest of `verl_recipes`.
"""

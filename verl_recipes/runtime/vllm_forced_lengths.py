"""vLLM's logits-processor interface around verl_recipes.bench.forced_lengths (the end-to-end bench's response lengths).

Loaded by the vLLM server verl starts, from the bench's override
`+actor_rollout_ref.rollout.engine_kwargs.vllm.logits_processors=['verl_recipes.runtime.vllm_forced_lengths:ForcedLengthsProcessor']`
(verl passes engine_kwargs.vllm to vLLM's CLI), and by the node runs (verl_recipes/node/overrides.yaml). Imports vLLM,
so it is only imported inside the engine.
"""

from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from verl_recipes.bench.forced_lengths import ForcedLengths, model_eos_ids


class ForcedLengthsProcessor(LogitsProcessor):
    def __init__(self, vllm_config, device, is_pin_memory: bool):
        model = vllm_config.model_config
        generation = model.try_get_generation_config() if hasattr(model, "try_get_generation_config") else {}
        self.lengths = ForcedLengths(model_eos_ids(model.hf_config, generation, model.model))

    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token wins

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for row in batch_update.removed:  # vLLM's order: removed, added, moved
            self.lengths.remove(row)
        for row, params, prompt_ids, output_ids in batch_update.added:
            self.lengths.add(row, prompt_ids or [], params.max_tokens, output_ids)
        for source, dest, direction in batch_update.moved:
            self.lengths.move(source, dest, swap=direction == MoveDirectionality.SWAP)

    def apply(self, logits):
        return self.lengths.apply(logits)

"""The end-to-end bench's arms: which config each one runs, and the overrides every arm shares.

`ours` is a recipe as `make <recipe>` runs it (our launcher); `verl_example` is verl's example settings for the same
workload on verl's defaults (verl_example.yaml), run as verl's script runs it (`python -m verl.trainer.main_ppo`);
`colocated_2gpu`, `separate_async` and `async` are the recipe and its async variants on two GPUs (1 + 1 for async).
The lever arms (issue 43) are `ours` plus one fragment each, so a lever's effect is its arm against `ours`;
`ours_sglang` is `ours` rolling out with SGLang (configs/rollout=sglang, issue 46).
Every arm gets the same shrink (bench_args): model, data, batch, steps, one rollout engine per GPU, no validation or
checkpoints, the file logger, the forced response lengths, and the flash-attn stand-in the lent GPU machine needs.
"""

from dataclasses import dataclass
from pathlib import Path

from verl_recipes.catalog import Recipe, parse

EXAMPLE_CONFIG = "verl_recipes/bench/verl_example"  # relative to the repo root, like a recipe's config_name


@dataclass(frozen=True)
class Arm:
    gpus: int
    variant: str | None = None  # the recipe's variant; None: the recipe itself
    verl_example: bool = False  # verl's example settings instead of the recipe
    fragment: str | None = None  # a lever: one config fragment over the recipe, e.g. "configs/perf/no_recompute"
    changes_math: bool = False  # the lever trains on other numbers than ours: opt-in only, never a default
    bundle: bool = False  # the fragment lists several levers' fragments: their sum, not a lever of its own
    rollout: str | None = None  # the recipe's configs/rollout choice swapped, e.g. "sglang"

    @property
    def overrides(self) -> list[str]:
        """What the arm changes over its config, as Hydra overrides: the fragment (configs/perf/no_recompute ->
        +configs/perf=no_recompute), then the rollout choice (configs/rollout=sglang)."""
        group, _, name = (self.fragment or "").rpartition("/")
        return ([f"+{group}={name}"] if self.fragment else []) + \
            ([f"configs/rollout={self.rollout}"] if self.rollout else [])


ARMS = {
    "ours": Arm(gpus=1),
    "verl_example": Arm(gpus=1, verl_example=True),
    "colocated_2gpu": Arm(gpus=2),
    "separate_async": Arm(gpus=2, variant="separate_async"),
    "async": Arm(gpus=2, variant="async"),
    # levers, each described in its fragment's header (bench/README.md, "Levers"). Liger's arm ran (1.10x a step) and
    # left: qwen25-7b-grpo composes configs/kernels/liger itself since 2026-11-29, so `ours` has it
    "ours_no_recompute": Arm(gpus=1, fragment="configs/perf/no_recompute"),
    "ours_logprob_budget": Arm(gpus=1, fragment="configs/perf/logprob_budget"),
    "ours_max_num_seqs": Arm(gpus=1, fragment="configs/perf/max_num_seqs"),
    "ours_replay_poll": Arm(gpus=1, fragment="configs/perf/replay_poll"),
    "ours_bypass": Arm(gpus=1, fragment="configs/perf/bypass_old_log_prob", changes_math=True),
    "ours_colocate_async": Arm(gpus=1, fragment="configs/perf/colocate_async", changes_math=True),
    # every lever above that preserves the math, at once (configs/perf/levers)
    "ours_levers": Arm(gpus=1, fragment="configs/perf/levers", bundle=True),
    "ours_sglang": Arm(gpus=1, rollout="sglang"),  # on the lent machine: SGLang's layer set (tests/gpu/pack_sglang.sh)
    # SGLang with the levers that paid on vLLM (configs/perf/levers_without_recompute): the candidate defaults
    "ours_sglang_levers": Arm(gpus=1, fragment="configs/perf/levers_without_recompute", bundle=True, rollout="sglang"),
}


@dataclass(frozen=True)
class ExampleConfig(Recipe):
    """verl_example.yaml dressed as a recipe, so compose() and check() prove it like one (its card is empty)."""

    @property
    def config_name(self) -> str:
        return EXAMPLE_CONFIG


def config_of(arm: str, recipe: str) -> Recipe:
    settings = ARMS[arm]
    if settings.verl_example:
        return ExampleConfig(name="verl-example", version="grpo")
    base = parse(recipe)
    return parse(f"{base.name}/{base.version}" + (f":{settings.variant}" if settings.variant else ""))


def bench_args(arm: str, model: Path, data_files: list[Path], steps: int, batch: int, mini_batch: int) -> list[str]:
    """Overrides every arm shares; the async arms keep their variant's rhythm (batch / mini_batch updates per sync)."""
    settings = ARMS[arm]
    train, val = (str(path) for path in data_files)
    args = [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files=['{train}']",
        f"data.val_files=['{val}']",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_batch}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=['console','file']",
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_RECIPES_FORCED_LENGTHS='1'",  # runtime/forced_lengths.py
        "+configs/attention=torch_varlen",  # no flash-attn on the lent machine: the same stand-in in every arm
    ]
    args += settings.overrides
    syncs = batch // mini_batch
    if settings.variant == "async":  # fully async streams prompts: no train batch, steps x batch prompts in all
        return args + ["configs/async=split_1_1", "data.train_batch_size=0",
                       f"async_training.trigger_parameter_sync_step={syncs}", "async_training.require_batches=1",
                       f"rollout.total_rollout_steps={steps * batch}"]
    args += [f"data.train_batch_size={batch}", f"trainer.total_training_steps={steps}"]
    if settings.variant == "separate_async":
        return args + ["configs/async=split_1_1", f"trainer.v1.separate_async.parameter_sync_step={syncs}"]
    return args + [f"trainer.n_gpus_per_node={settings.gpus}", "trainer.nnodes=1"]

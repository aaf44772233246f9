"""Per-stage seconds of each training step, from verl 0.9.1's `timing_s/<timer>` metrics.

The V1 trainer (`trainer/ppo/v1/trainer_base.py`, `trainer_sync.py`) times these blocks inside the
`step` timer with `marked_timer` (times add up when a timer runs more than once in a step):
gen (waiting on the replay buffer for generated samples), reward (only with a colocated reward
model), old_log_prob, ref, values and update_critic (critic only), adv, update_actor,
save_checkpoint (on save steps), update_weights (weight sync to the rollout engine, the "reshard"
of older verl). `testing` (validation) is timed outside `step` in V1, so it is not subtracted.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_recipes.perf.metrics_log import STEP_KEY, value


@dataclass(frozen=True)
class Stage:
    name: str
    always_shown: bool  # a column even when absent, so a missing stage is visible

    @property
    def key(self) -> str:
        return f"timing_s/{self.name}"


STAGES = (
    Stage("gen", True),
    Stage("update_weights", True),
    Stage("reward", True),
    Stage("old_log_prob", True),
    Stage("ref", True),
    Stage("values", False),
    Stage("adv", True),
    Stage("update_critic", False),
    Stage("update_actor", True),
    Stage("save_checkpoint", False),
)
OUTSIDE_STEP = ("timing_s/testing",)


@dataclass
class StepStages:
    step: int
    seconds: dict[str, float | None]  # stage name -> seconds; None when the key is absent
    total: float  # timing_s/step

    @property
    def other(self) -> float:
        """Step time not covered by a shown stage: dispatch, data movement, metrics, untimed work."""
        return self.total - sum(s for s in self.seconds.values() if s is not None)


def step_stages(steps: dict[int, dict]) -> tuple[list[Stage], list[StepStages], list[str]]:
    """The stage columns to show, one row per step, and notes on absent or unbroken-out timers."""
    shown = [stage for stage in STAGES if stage.always_shown or any(stage.key in data for data in steps.values())]
    rows = [
        StepStages(step, {stage.name: value(data, stage.key) for stage in shown}, value(data, STEP_KEY))
        for step, data in steps.items()
    ]
    notes = []
    for stage in shown:
        missing = [row.step for row in rows if row.seconds[stage.name] is None]
        if len(missing) == len(rows):
            notes.append(f"{stage.key} is absent in every step (column '{stage.name}' shows -)")
        elif missing and stage.always_shown:
            notes.append(f"{stage.key} is absent in steps {missing}")
    known = {stage.key for stage in STAGES} | {STEP_KEY, *OUTSIDE_STEP}
    extra = sorted(
        {
            key
            for data in steps.values()
            for key in data
            if key.startswith("timing_s/") and key not in known and not key.startswith("timing_s/agent_loop/")
        }
    )
    if extra:
        notes.append(f"timers not broken out (counted in 'other' when they ran inside the step): {', '.join(extra)}")
    return shown, rows, notes

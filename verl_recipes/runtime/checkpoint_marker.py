"""verl's checkpoint callback for every launch (trainer.checkpoint_callback_class, set by verl_recipes/resume.py):
once verl's whole save of a step has returned (actor, critic, data.pt, the tracker), mark the step's folder complete,
then prune to the launch's keep count (verl_recipes/runtime/checkpoints.py says why verl's own pruning is off).

verl calls it on the driver after each save (verl/trainer/ppo/checkpoint_callback.py). An asynchronous save
(Megatron's async_save) may still be writing when it is called: such a checkpoint is never marked, so never resumed.
"""

from __future__ import annotations

import os
from pathlib import Path

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from verl_recipes.runtime import checkpoints


class MarkComplete(CheckpointCallback):
    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        if async_save:
            return
        folder = Path(checkpoint_dir)
        checkpoints.mark(folder)
        keep = os.environ.get(checkpoints.KEEP_ENV, "")
        if keep:
            for removed in checkpoints.prune(folder.parent, int(keep)):
                print(f"[checkpoints] removed {removed} (keeping the newest {keep} complete)", flush=True)

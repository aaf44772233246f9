"""Which of a run's checkpoints are complete, and which may be pruned.

verl 0.9.1 writes a checkpoint's parts one after another (actor/, critic/, data.pt, then the tracker file
latest_checkpointed_iteration.txt, not atomically), and with max_actor_ckpt_to_keep its checkpoint manager removes
the previous step's actor/ as soon as the new actor/ is written, before data.pt and the tracker. A run killed in
between is left with no whole checkpoint, and a resume of the newest folder loads half of one.

Here a checkpoint counts only when its COMPLETE marker exists: verl_recipes/runtime/checkpoint_marker.py writes it
(atomically) once verl's whole save has returned, then prunes. The launcher turns verl's own pruning off and hands the
keep count to that callback (KEEP_ENV), so pruning keeps the newest `keep` complete checkpoints and never touches the
one being written. A folder from before the markers (no marker anywhere) counts the one verl's tracker names when its
actor/ and data.pt are there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

MARKER = "COMPLETE"
TRACKER = "latest_checkpointed_iteration.txt"  # verl/trainer/ppo/v1/trainer_base.py _save_checkpoint
KEEP_ENV = "VERL_RECIPES_KEEP_CHECKPOINTS"


def step(folder: Path) -> int:
    match = re.fullmatch(r"global_step_(\d+)", folder.name)
    return int(match.group(1)) if match else -1


def saved(checkpoints: Path) -> list[Path]:
    """The global_step_N folders, oldest first."""
    return sorted((p for p in checkpoints.glob("global_step_*") if p.is_dir() and step(p) >= 0), key=step)


def is_complete(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def _from_tracker(checkpoints: Path, folders: list[Path]) -> list[Path]:
    """In a folder written before the markers (none of `folders` has one): the step verl's tracker names, when its
    actor/ and data.pt are there."""
    tracker = checkpoints / TRACKER
    if not tracker.is_file():
        return []
    named = checkpoints / f"global_step_{tracker.read_text().strip()}"
    return [named] if named in folders and (named / "actor").is_dir() and (named / "data.pt").is_file() else []


def newest_complete(checkpoints: Path) -> tuple[Path | None, list[Path]]:
    """The newest complete checkpoint (None when there is none), and the incomplete folders newer than it."""
    folders = saved(checkpoints)
    complete = [f for f in folders if is_complete(f)] or _from_tracker(checkpoints, folders)
    chosen = complete[-1] if complete else None
    return chosen, [f for f in folders if f not in complete and (chosen is None or step(f) > step(chosen))]


def mark(folder: Path) -> None:
    """Write folder's marker, naming its parts; a reader sees the whole file or none (a rename)."""
    partial = folder / f".{MARKER}.partial"
    partial.write_text(json.dumps({"step": step(folder), "parts": sorted(p.name for p in folder.iterdir()
                                                                         if p.name != partial.name)}))
    os.replace(partial, folder / MARKER)


def prune(checkpoints: Path, keep: int) -> list[Path]:
    """Remove every folder older than the `keep` newest complete checkpoints; returns what it removed."""
    folders = saved(checkpoints)
    complete = [f for f in folders if is_complete(f)]
    if keep < 1 or len(complete) <= keep:
        return []
    oldest_kept = step(complete[-keep])
    removed = [f for f in folders if step(f) < oldest_kept]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed

"""Which run folder a launch trains in, and whether it resumes: decided here, said before verl starts, never left
to verl's `trainer.resume_mode=auto`.

A run folder, `runs/<recipe>-<version>[-<variant>][<tag>][-N]/`, holds
    config.yaml       the composed config its checkpoints were trained with (written by the launch that made it)
    checkpoints/      verl's global_step_N/ folders and latest_checkpointed_iteration.txt
    launches/<time>/  one folder per launch: its resolved config, metrics.jsonl, exit code

RESUME=auto (the default): resume the newest complete checkpoint (verl_recipes/runtime/checkpoints.py: one whose
save finished; the launcher names the incomplete ones it passes over) of the recipe's newest run folder when the new
composed config equals the stored one except for SAFE_TO_CHANGE keys; with another config, stop, name every key that
differs and say how to start fresh or force it. RESUME=never: a fresh run in a new folder (-2, -3, ...); an earlier
run's folder is never modified or deleted. RESUME=force: resume whatever the config. Smokes always start fresh.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from verl_recipes import yaml_parser
from verl_recipes.catalog import RecipeError
from verl_recipes.compose import flatten, runs_dir
from verl_recipes.runtime import checkpoints as ckpt

MODES = ("auto", "never", "force")
STORED = "config.yaml"
CHECKPOINTS = "checkpoints"
LAUNCHES = "launches"
TRACKER = ckpt.TRACKER
MARKER_CALLBACK = "verl_recipes.runtime.checkpoint_marker.MarkComplete"
KEEP_KEY = f"ray_kwargs.ray_init.runtime_env.env_vars.{ckpt.KEEP_ENV}"
# Keys a resumed run may change: how long, how often to test and save, and what is logged or profiled. Anything
# else (data, model, objective, batch sizes, parallel layout) changes what the checkpoint's optimizer state means.
SAFE_TO_CHANGE = (
    "trainer.total_epochs", "trainer.total_training_steps", "trainer.logger", "trainer.test_freq",
    "trainer.save_freq", "trainer.log_val_generations", "trainer.val_before_train", "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep", "trainer.rollout_data_dir", "trainer.validation_data_dir",
    "trainer.resume_mode", "trainer.resume_from_path", "trainer.default_local_dir", "trainer.project_name",
    "trainer.experiment_name", "global_profiler.*", "*.profiler.*", "ray_kwargs.ray_init.runtime_env.env_vars.WANDB_*",
    "ray_kwargs.ray_init.runtime_env.env_vars.MLFLOW_*", "trainer.checkpoint_callback_class", KEEP_KEY,
)


@dataclass(frozen=True)
class Decision:
    run_dir: Path
    checkpoint: Path | None  # the global_step_N folder to resume, or None for a fresh run
    note: str  # what the launcher prints before verl starts
    keep: int | None = None  # the config's trainer.max_actor_ckpt_to_keep: complete checkpoints kept (None: all)

    def overrides(self) -> list[str]:
        """verl keys that make verl do exactly this: checkpoints in this run folder, resumed or not, each marked
        complete once saved and pruned by the marker's callback, not by verl (verl_recipes/runtime/checkpoints.py)."""
        keys = [f"trainer.default_local_dir={self.run_dir / CHECKPOINTS}",
                f"trainer.checkpoint_callback_class={MARKER_CALLBACK}",
                "trainer.max_actor_ckpt_to_keep=null", "trainer.max_critic_ckpt_to_keep=null"]
        if self.keep:
            keys.append(f"+{KEEP_KEY}='{self.keep}'")
        if self.checkpoint is None:
            return keys + ["trainer.resume_mode=disable"]
        return keys + ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={self.checkpoint}"]


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete global_step_N folder, or None."""
    return ckpt.newest_complete(run_dir / CHECKPOINTS)[0]


def run_folders(name: str) -> list[Path]:
    """`name`, `name-2`, `name-3`, ... that exist, oldest first."""
    base = runs_dir() / name
    found = [base] if base.is_dir() else []
    found += sorted((p for p in runs_dir().glob(f"{name}-*") if re.fullmatch(rf"{re.escape(name)}-(\d+)", p.name)),
                    key=lambda p: int(p.name.rsplit("-", 1)[1]))
    return found


def next_folder(name: str) -> Path:
    existing = run_folders(name)
    if not existing:
        return runs_dir() / name
    numbers = [1 if p.name == name else int(p.name.rsplit("-", 1)[1]) for p in existing]
    return runs_dir() / f"{name}-{max(numbers) + 1}"


def comparable(cfg: DictConfig | dict) -> dict:
    container = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    return {k: v for k, v in flatten(container).items() if not any(fnmatch.fnmatchcase(k, p) for p in SAFE_TO_CHANGE)}


def differences(stored: dict, cfg: DictConfig) -> list[str]:
    old, new = comparable(stored), comparable(cfg)
    return [f"{key}: {old.get(key, '<absent>')!r} -> {new.get(key, '<absent>')!r}"
            for key in sorted(old.keys() | new.keys()) if old.get(key, "<absent>") != new.get(key, "<absent>")]


def decide(name: str, cfg: DictConfig, mode: str = "auto", label: str = "") -> Decision:
    """Where a launch of run `name` with composed config `cfg` trains, and whether it resumes."""
    if mode not in MODES:
        raise RecipeError(f"RESUME={mode!r}: use one of {', '.join(MODES)}")
    folders = run_folders(name)
    newest = folders[-1] if folders else None
    checkpoint, incomplete = ckpt.newest_complete(newest / CHECKPOINTS) if newest else (None, [])
    passed = (f"; passed over {len(incomplete)} incomplete checkpoint(s), their save never finished: "
              + ", ".join(f.name for f in incomplete)) if incomplete else ""
    keep = cfg.trainer.get("max_actor_ckpt_to_keep")
    if mode == "never" or newest is None or checkpoint is None:
        if newest is not None and not incomplete and mode != "never" and _same_or_unset(newest, cfg):
            return Decision(newest, None, f"fresh run in {newest} (it holds no checkpoint yet)", keep)
        folder = next_folder(name)
        why = " (RESUME=never)" if mode == "never" and checkpoint else ""
        return Decision(folder, None, f"fresh run in {folder}{why}{passed}", keep)
    stored_file = newest / STORED
    stored = yaml_parser.safe_load(stored_file.read_text()) if stored_file.is_file() else None
    changed = differences(stored, cfg) if stored is not None else ["(no stored config.yaml beside the checkpoints)"]
    if mode == "force" or not changed:
        forced = f"; RESUME=force despite {len(changed)} changed key(s)" if changed and mode == "force" else ""
        note = f"resuming {checkpoint} at step {ckpt.step(checkpoint)}{forced}{passed}"
        return Decision(newest, checkpoint, note, keep)
    make = f"make {label}" if label else "make <recipe>"
    raise RecipeError(
        f"{newest} has checkpoints up to {checkpoint.name}, trained with another config; not resuming it under this "
        f"one. Keys that differ (stored -> now):\n    " + "\n    ".join(changed) + "\n"
        f"  Start a fresh run in a new folder ({next_folder(name).name}; the old one is kept): {make} ... RESUME=never\n"
        f"  Resume it anyway with the new config: {make} ... RESUME=force")


def _same_or_unset(folder: Path, cfg: DictConfig) -> bool:
    stored = folder / STORED
    return not stored.is_file() or not differences(yaml_parser.safe_load(stored.read_text()), cfg)


def list_runs() -> list[str]:
    """One line per run folder under runs/: recipe, last checkpointed step, how its last launch ended, folder."""
    rows = []
    for folder in sorted(p for p in runs_dir().iterdir() if p.is_dir()) if runs_dir().is_dir() else []:
        launches = sorted((folder / LAUNCHES).glob("*/launch.json"), key=lambda p: p.stat().st_mtime)
        if not launches and not (folder / STORED).is_file():
            continue  # not a run folder of this launcher (e.g. an SFT run's output)
        last = json.loads(launches[-1].read_text()) if launches else {}
        code = last.get("exit_code")
        status = "no launch" if not last else "running or killed" if code is None else "done" if code == 0 \
            else f"failed (exit {code})"
        checkpoint = latest_checkpoint(folder)
        step = f"step {ckpt.step(checkpoint)}" if checkpoint else "no checkpoint"
        rows.append(f"{last.get('recipe', '?'):40} {step:14} {status:18} {folder}")
    return rows

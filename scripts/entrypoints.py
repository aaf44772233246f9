"""verl entry points a recipe may name in its card, and the verl config each one composes over."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from scripts.catalog import RecipeError

# entry module -> (verl config name, its folder inside the verl package)
ENTRYPOINTS = {
    "verl.trainer.main_ppo": ("ppo_trainer", "trainer/config"),
    "verl.experimental.fully_async_policy.fully_async_main": (
        "fully_async_ppo_trainer",
        "experimental/fully_async_policy/config",
    ),
}



def verl_root() -> Path:
    """The installed verl package (found without importing it, which is slow)."""
    return Path(importlib.util.find_spec("verl").origin).parent


def searchpath() -> str:
    """Every entry point's config folder, so a recipe's `- /ppo_trainer` or `- /fully_async_ppo_trainer` resolves.
    file:// because fully_async_policy/config is not a Python package that pkg:// could name."""
    return ",".join(f"file://{verl_root() / folder}" for _, folder in ENTRYPOINTS.values())


def base_config_name(entrypoint: str) -> str:
    if entrypoint not in ENTRYPOINTS:
        raise RecipeError(f"card entrypoint '{entrypoint}' is not one of: {', '.join(ENTRYPOINTS)}")
    return ENTRYPOINTS[entrypoint][0]


def config_dir_of(config_name: str) -> str:
    for name, folder in ENTRYPOINTS.values():
        if name == config_name:
            return str(verl_root() / folder)
    raise RecipeError(f"no verl config named '{config_name}'")

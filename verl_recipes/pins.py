"""Pinned configs: the resolved config of every published recipe version and variant, committed beside it as
recipes/<name>/<version>/resolved/<recipe or variant>.yaml.

A version composes fragments, parent versions and verl's own defaults, which all keep changing: without a pin,
`v1` would silently change when a fragment is retuned, and a `make cp` child when its parent does. `make check`
fails when composition no longer reproduces a pin, naming every key that moved with both values; `make pin`
rewrites the pins on purpose, in the same commit as the change. The diff between two versions' pins is their
changelog.

Pins are portable: the data folder and the repository path are written as <RL_DATA_DIR> and <repo>.
"""

from __future__ import annotations

from pathlib import Path

from verl_recipes import yaml_parser
from verl_recipes.catalog import MAIN, REPO, Recipe, data_dir, root
from verl_recipes.compose import compose, flatten, to_yaml

FOLDER = "resolved"


def pin_file(recipe: Recipe) -> Path:
    return recipe.folder / FOLDER / f"{recipe.variant or MAIN}.yaml"


def pinned_text(recipe: Recipe) -> str:
    """The recipe's resolved config as it composes now, with machine-specific paths replaced."""
    text = to_yaml(compose(recipe, naming=False))
    return text.replace(str(data_dir()), "<RL_DATA_DIR>").replace(str(REPO), "<repo>")


def header(recipe: Recipe) -> str:
    return (f"# {recipe.label}, resolved: what `make {recipe.name}"
            f"{' VARIANT=' + recipe.variant if recipe.variant else ''}` runs (before ARGS and run names).\n"
            "# Written by `make pin`; `make check` fails when composition no longer reproduces it.\n")


def drift(recipe: Recipe) -> list[str]:
    """Every way the recipe's composition differs from its pin; [] when it matches."""
    path = pin_file(recipe)
    rel = path.relative_to(root())
    if not path.is_file():
        return [f"{rel} is missing: a published version is pinned; run `make pin` and commit the file"]
    pinned = flatten(yaml_parser.safe_load(path.read_text()) or {})
    now = flatten(yaml_parser.safe_load(pinned_text(recipe)) or {})
    changed = sorted(k for k in pinned.keys() | now.keys() if pinned.get(k, "<absent>") != now.get(k, "<absent>"))
    if not changed:
        return []
    lines = [f"{key}: {pinned.get(key, '<absent>')!r} -> {now.get(key, '<absent>')!r}" for key in changed]
    return [f"composition no longer reproduces {rel} ({len(changed)} key(s) moved): a fragment, parent version or "
            f"verl changed under a published version. Keep the pin and undo the change, put the change in a new "
            f"version (`make cp`), or accept it with `make pin` in the same commit:\n        " + "\n        ".join(lines)]


def pin(recipes: list[Recipe]) -> list[Path]:
    """Write the pins of `recipes`; returns the files that changed."""
    changed = []
    for recipe in recipes:
        path = pin_file(recipe)
        text = header(recipe) + pinned_text(recipe)
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(path)
    return changed

"""`make cp FROM=<recipe>[/vN][:variant] TO=<new>`: a new recipe that inherits its source, ready to edit."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from verl_recipes import catalog, pins
from verl_recipes.catalog import CARD, REPO, Recipe, RecipeError, recipes_dir

CARD_FIELDS = ("workload", "model", "hardware", "data", "entrypoint")


def make_targets(makefile: Path = REPO / "Makefile") -> tuple[set[str], set[str]]:
    """(fixed targets, per-recipe suffixes) of the Makefile: a recipe name must collide with neither."""
    text = makefile.read_text()
    fixed = {m.group(1) for m in re.finditer(r"^([a-z][\w.-]*)\s*:(?!=)", text, re.M)}
    suffixes = set(re.findall(r"\$\(addsuffix (-[\w-]+),\$\(RECIPES\)\)", text))
    return fixed, suffixes


def name_clash(new_name: str) -> str | None:
    """Why `new_name` would shadow or be shadowed by a make target, or None."""
    fixed, suffixes = make_targets()
    if new_name in fixed:
        return f"`make {new_name}` is already a target of the Makefile"
    for suffix in sorted(suffixes):
        if new_name.endswith(suffix):
            return f"it ends in '{suffix}', which the Makefile appends to recipe names (`make <recipe>{suffix}`)"
    return None


def copy_recipe(source: Recipe, new_name: str) -> list[str]:
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", new_name):
        raise RecipeError(f"TO={new_name!r}: use lower-case letters, digits, '.' and '-' (it becomes a make target)")
    clash = name_clash(new_name)
    if clash:
        raise RecipeError(f"TO={new_name!r} clashes with a make target: {clash}; pick another name")
    folder = recipes_dir() / new_name / "v1"
    if (recipes_dir() / new_name).exists():
        raise RecipeError(f"recipes/{new_name} exists already; pick another TO= or edit it directly")
    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text(
        "# @package _global_\n"
        f"# {new_name} v1: inherits {source.label} (made by `make cp`). Add only the keys that differ below;\n"
        f"# prove them with `make {new_name}-check` and compare with `make diff A={source.label} B={new_name}`.\n"
        "defaults:\n"
        f"  - /{source.config_name}\n"
        "  - _self_\n"
    )
    card = {"recipe": new_name, "version": "v1", "status": "unverified", "verl": source.card.get("verl"),
            "derived_from": source.label}
    card.update({k: source.card_value(k) for k in CARD_FIELDS if source.card_value(k) is not None})
    (folder / CARD).write_text(yaml.safe_dump(card, sort_keys=False))
    readme = recipes_dir() / new_name / "README.md"
    readme.write_text(f"# {new_name}\n\nDerived from `{source.label}`; see its README for the workload, hardware and "
                      f"results. Status: unverified.\n\n## What differs\n\n(describe each changed key and why)\n")
    # pinned from the start, so a later change of the parent shows up in `make check` as this recipe's drift
    pinned = pins.pin([catalog.get(new_name)])
    return [str(p.relative_to(recipes_dir().parent)) for p in (folder / "recipe.yaml", folder / CARD, readme, *pinned)]

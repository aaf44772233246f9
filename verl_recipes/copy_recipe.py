"""`make cp FROM=<recipe>[/vN][:variant] TO=<new>`: a new recipe that inherits its source, ready to edit."""

from __future__ import annotations

import re

import yaml

from verl_recipes.catalog import CARD, Recipe, RecipeError, recipes_dir

CARD_FIELDS = ("workload", "model", "hardware", "data", "entrypoint")


def copy_recipe(source: Recipe, new_name: str) -> list[str]:
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", new_name):
        raise RecipeError(f"TO={new_name!r}: use lower-case letters, digits, '.' and '-' (it becomes a make target)")
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
    return [str(p.relative_to(recipes_dir().parent)) for p in (folder / "recipe.yaml", folder / CARD, readme)]

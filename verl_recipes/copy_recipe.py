"""`make cp FROM=<recipe>[/vN][:variant] TO=<new>`: a new recipe that inherits its source, ready to edit.

The copy is unpublished (card `published: false`): `make <new>-check` proves it after every edit, it has no pins, and
its parity record is its source's (verl_recipes/parity.py), so `make <new>-upstream` lists the edits, for
information. `make <new>-publish` (publish below) turns the strict rules of a published recipe on."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from verl_recipes import catalog, parity, pins, yaml_parser
from verl_recipes.catalog import CARD, CHECKS, REPO, Recipe, RecipeError, recipes_dir

# card fields that describe the source's own record, not the workload a copy inherits (`learns:` is a learning run of
# the source itself: the copy has its own to earn)
OWN_FIELDS = ("recipe", "version", "status", "command", "results", "learns", "variants", "derived_from", "published")


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


def copied_card(source: Recipe, new_name: str) -> dict:
    """The copy's card: the source's fields as they apply to it (a variant's own entries win), without what belongs
    to the source's published record (status, results, command)."""
    fields = {k: v for k, v in source.card.items() if k not in OWN_FIELDS}
    fields.update((source.card.get("variants") or {}).get(source.variant) or {} if source.variant else {})
    return {"recipe": new_name, "version": "v1", "status": "unverified", "derived_from": source.label,
            # an unpublished copy: no pins, deviations listed for information (make <name>-publish turns both on)
            "published": False, "command": f"make {new_name}", **fields}


def copied_checks(source: Recipe) -> str | None:
    """The source's smoke gates (checks.yaml), with a variant's own section folded in; None when it has none."""
    path = source.folder / CHECKS
    if not path.is_file():
        return None
    if not source.variant:
        return path.read_text()
    checks = yaml_parser.safe_load(path.read_text()) or {}
    own = (checks.pop("variants", None) or {}).get(source.variant) or {}
    checks["present"] = [m for m in checks.get("present", []) if m not in own.get("drop", [])] + own.get("present", [])
    return f"# the smoke gates of {source.label} (verl_recipes/check/gates.py)\n" + yaml.safe_dump(checks, sort_keys=False)


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
    written = [folder / "recipe.yaml", folder / CARD]
    (folder / "recipe.yaml").write_text(
        "# @package _global_\n"
        f"# {new_name} v1: inherits {source.label} (made by `make cp`). Add only the keys that differ below;\n"
        f"# prove them with `make {new_name}-check` and compare with `make diff A={source.label} B={new_name}`.\n"
        "defaults:\n"
        f"  - /{source.config_name}\n"
        "  - _self_\n"
    )
    (folder / CARD).write_text(yaml.safe_dump(copied_card(source, new_name), sort_keys=False))
    checks = copied_checks(source)
    if checks is not None:
        (folder / CHECKS).write_text(checks)
        written.append(folder / CHECKS)
    readme = recipes_dir() / new_name / "README.md"
    readme.write_text(f"# {new_name}\n\nDerived from `{source.label}`; see its README for the workload, hardware and "
                      f"results. Status: unverified.\n\n## What differs\n\n(describe each changed key and why)\n")
    return [str(p.relative_to(recipes_dir().parent)) for p in (*written, readme)]


def publish(name: str) -> list[Path]:
    """Hold a copy to the rules of a published recipe: drop `published: false` from each version's card, write its
    pins and its README's differs-from-upstream table. Returns the files written."""
    written = []
    for version in catalog.versions(name):
        card = recipes_dir() / name / version / CARD
        text = card.read_text()
        if re.search(r"^published: false\n", text, re.M):
            card.write_text(re.sub(r"^published: false\n", "", text, flags=re.M))
            written.append(card)
    if not written:
        raise RecipeError(f"recipes/{name} is published already (no card says `published: false`)")
    for recipe in (r for r in catalog.all_recipes() if r.name == name and r.variant is None):
        record = parity.upstream_file(recipe)
        source = recipe.card.get("derived_from")
        if source and not record.is_file():  # its own record from now on: the source's, to edit as it diverges
            entry = parity.reference(catalog.parse(source))
            record.write_text(f"# the published run {source} reproduces (copied by `make {name}-publish`)\n"
                              + yaml.safe_dump({"recipe": entry}, sort_keys=False))
            written.append(record)
    written += pins.pin([r for r in catalog.all_recipes() if r.name == name])
    if parity.write_readme(name):
        written.append(recipes_dir() / name / "README.md")
    return written

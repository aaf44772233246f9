"""`python -m verl_recipes extract <recipe>`: write into upstream.yaml every override its cited scripts pass.

For the recipe entry and each variant that cites a script of its own, the script is read at its commit
(verl_recipes/upstream_script.py), every Hydra override it passes is resolved and translated to its verl 0.9.1 key
(verl_recipes/legacy_keys.py), and the entry's `settings` (0.9.1 key: value) and `translated` (legacy key: 0.9.1
key, or `none: <why>`) are rewritten from them. A `source.config` names the YAML the script composes
(`--config-name`): its values come first, the script's overrides on top, as in Hydra. Nothing else in the file
is touched (why, result, inherited_reason, from_recipe), so a re-run on unchanged scripts rewrites nothing.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from verl_recipes import entrypoints, yaml_parser
from verl_recipes.catalog import Recipe, RecipeError, root
from verl_recipes.check.keys import ignored_replacement, is_open
from verl_recipes.compose import compose_verl_base, flatten
from verl_recipes.legacy_keys import translate
from verl_recipes.upstream_script import launch, overrides, script_text

HEADER = ("# The published runs this version reproduces, in verl 0.9.1 key names (verl_recipes/parity.py).\n"
          "# settings and translated are written by `python -m verl_recipes extract <recipe>` from the cited scripts; "
          "edit the rest.\n")


def passed(source: dict, git_dirs: dict[str, Path] | None = None) -> dict:
    """{key as the script writes it, without `+`: value} of every override, the last one of a key winning."""
    values = {}
    if source.get("config"):  # the YAML the script composes: its values first
        config = yaml_parser.safe_load(script_text({**source, "path": source["config"]}, git_dirs)) or {}
        values.update(flatten({k: v for k, v in config.items() if k not in ("hydra", "defaults")}))
    _, arguments = launch(script_text(source, git_dirs), source["path"])
    try:
        parsed = OverridesParser.create().parse_overrides(overrides(arguments))
    except HydraException as err:
        raise RecipeError(f"{source['path']}: an override Hydra cannot parse: {err}") from None
    for override in parsed:
        if override.is_delete():
            raise RecipeError(f"{source['path']}: `{override.input_line}` deletes a key; record it by hand")
        values[override.key_or_group] = override.value()
    return values


def translated(values: dict, schema: set[str], where: str) -> tuple[dict, dict]:
    """(settings {0.9.1 key: value}, translated {legacy key: 0.9.1 key or 'none: why'}) of a script's overrides."""
    settings, renamed = {}, {}
    for key, value in values.items():
        new, why = translate(key)
        if why:
            renamed[key] = f"none: {why}"
            continue
        if new != key:
            renamed[key] = new
        known = new in schema or is_open(new) or any(k.startswith(new + ".") for k in schema)
        if not known or ignored_replacement(new):
            raise RecipeError(f"{where}: '{key}' is not a verl 0.9.1 key and verl_recipes/legacy_keys.py does not "
                              f"say what it became: add it to RENAMED or NO_EQUIVALENT, with the evidence")
        settings[new] = value
    return settings, renamed


def _schema(recipe: Recipe, values: dict) -> set[str]:
    engine = "megatron" if values.get("model_engine") == "megatron" else "dp"
    return set(flatten(compose_verl_base(entrypoints.get(recipe.entrypoint).config_name, engine)))


def extract(recipe: Recipe, git_dirs: dict[str, Path] | None = None) -> bool:
    """Rewrite the settings of the version's upstream.yaml from its scripts; True if the file changed."""
    from verl_recipes import catalog

    path = recipe.folder / "upstream.yaml"
    data = yaml_parser.safe_load(path.read_text())
    entries = [(None, data["recipe"]), *((name, entry) for name, entry in (data.get("variants") or {}).items())]
    for variant, entry in entries:
        same_run = entry.get("extends") == "recipe" and entry["source"] == data["recipe"]["source"]
        if same_run:  # the recipe's run: its reference is the recipe's, deviations are written in our YAML
            entry.pop("settings", None)
            entry.pop("translated", None)
            continue
        where = f"{path.relative_to(root())} {variant or 'recipe'} ({entry['source']['path']})"
        values = passed(entry["source"], git_dirs)
        member = catalog.get(recipe.name, recipe.version, variant)
        entry["settings"], entry["translated"] = translated(values, _schema(member, values), where)
    text = HEADER + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)
    changed = text != path.read_text()
    if changed:
        path.write_text(text)
    return changed

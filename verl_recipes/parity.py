"""Parity with the published runs our recipes reproduce.

Each recipe version keeps its references as data beside it, `recipes/<name>/<version>/upstream.yaml`:

    recipe:                       # the version's main recipe; a variant has its own entry under `variants:`
      source: {repo: verl-project/verl, path: examples/grpo_trainer/run_qwen3_8b_fsdp.sh, commit: <sha>}
      result: what the run published, and where
      translated: {legacy key: verl 0.9.1 key}   # the keys of the script that 0.9.1 renamed or moved
      settings: {verl 0.9.1 dotted key: upstream value}
      inherited_reason: why keys this recipe keeps from a parent recipe (make cp, a stand-in) may differ
    variants:
      megatron: {extends: recipe, source: ..., settings: {only what the variant's run sets differently}}

Every key where the composed recipe differs from its reference is a deviation, and a deviation needs a reason: a
comment `# deviation: <one line>` on the line of our YAML file (recipe, variant or fragment) that sets the key, or
on the comment line just above it. Keys that are ours by design everywhere (paths, names, loggers) are declared
once, in BY_DESIGN. `make <recipe>-upstream` prints the deviations; `make check` fails a published recipe with an
unexplained one, naming the key; each recipe README's "differs from upstream" table is generated from the same data.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from verl_recipes.catalog import UPSTREAM as FILE
from verl_recipes.catalog import Recipe, RecipeError, root
from verl_recipes.compose import compose, flatten, own_files

MARK = "# deviation:"
# Keys that differ from every upstream script by design: declared here once, not per recipe.
BY_DESIGN = {
    "data.train_files": "our data preparation writes the files (verl_recipes/data); upstream reads its own paths",
    "data.val_files": "our data preparation writes the files (verl_recipes/data); upstream reads its own paths",
    "trainer.project_name": "run names derive from the recipe folder (verl_recipes/compose.py)",
    "trainer.experiment_name": "run names derive from the recipe folder (verl_recipes/compose.py)",
    "trainer.default_local_dir": "checkpoints go to the run folder the launcher picks",
    "trainer.logger": "console + file by default (the smoke gates and reports read the file); configs/logging/* add "
                      "wandb, tensorboard or mlflow",
    "trainer.rollout_data_dir": "set per run by the user",
    "reward.custom_reward_function.path": "our time-bounded rewards (rewards/) replace verl's and "
                                          "verl-recipe's reward modules",
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": "our tools (agents/) replace the ones "
                                                             "verl 0.8 deleted",
}


@dataclass(frozen=True)
class Deviation:
    key: str
    ours: object
    upstream: object
    reason: str | None  # None: unexplained
    where: str  # the file that gives the reason, or "BY_DESIGN"


def upstream_file(recipe: Recipe) -> Path:
    return recipe.folder / FILE


def reference(recipe: Recipe) -> dict:
    """The upstream record of the recipe (or its variant), `extends` resolved: {source, result, settings, ...}."""
    path = upstream_file(recipe)
    if not path.is_file() and not recipe.published:  # an unpublished `make cp` copy inherits its source's record
        from verl_recipes import catalog

        return reference(catalog.parse(recipe.card["derived_from"]))
    if not path.is_file():
        raise RecipeError(f"{path.relative_to(root())} is missing: record the published run this version reproduces")
    data = yaml.safe_load(path.read_text()) or {}
    entry = (data.get("variants") or {}).get(recipe.variant) if recipe.variant else data.get("recipe")
    if entry is None:
        where = f"variants.{recipe.variant}" if recipe.variant else "recipe"
        raise RecipeError(f"{path.relative_to(root())} has no `{where}` entry: record the published run it follows")
    if entry.get("extends") == "recipe":  # the recipe's settings, with the variant's on top; `key: null` drops one
        base = data.get("recipe") or {}
        merged = {**(base.get("settings") or {}), **(entry.get("settings") or {})}
        entry = {**base, **entry, "settings": {k: v for k, v in merged.items() if v is not None}}
    for field in ("source", "settings"):
        if not entry.get(field):
            raise RecipeError(f"{path.relative_to(root())}: the entry for {recipe.label} needs `{field}`")
    return entry


def _same(ours, theirs) -> bool:
    if isinstance(ours, bool) or isinstance(theirs, bool):
        return ours is theirs or (str(ours).lower() == str(theirs).lower())
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        return math.isclose(float(ours), float(theirs), rel_tol=1e-9)
    if isinstance(ours, (list, tuple)) and isinstance(theirs, (list, tuple)):
        return len(ours) == len(theirs) and all(_same(a, b) for a, b in zip(ours, theirs))
    return ours == theirs


# ---------------------------------------------------------------- reasons written beside the keys


_KEY = re.compile(r"^(\s*)([A-Za-z_+][\w.+\-/]*)\s*:(.*)$")
_BLOCK_SCALAR = re.compile(r"^\s*[|>][+-]?\s*(#.*)?$")


def reasons_in(path: Path) -> dict[str, str]:
    """{dotted key: reason} from `# deviation:` comments of one of our YAML files (`# @package _global_` files)."""
    found, stack, pending, block_indent = {}, [], None, None
    for line in path.read_text().splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if block_indent is not None:
            if stripped and indent <= block_indent:
                block_indent = None
            else:
                continue
        if not stripped:
            continue
        if stripped.startswith("#"):
            pending = stripped[len(MARK):].strip() if stripped.startswith(MARK) else pending
            continue
        match = _KEY.match(line)
        if not match or stripped.startswith("-"):
            pending = None
            continue
        key, rest = match.group(2), match.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key.lstrip("+")])
        stack.append((indent, key.lstrip("+")))
        value, _, comment = rest.partition(" #")
        if comment.strip().startswith(MARK[2:]):
            found[dotted] = comment.strip()[len(MARK) - 2:].strip()
        elif pending:
            found[dotted] = pending
        pending = None
        if _BLOCK_SCALAR.match(value):
            block_indent = indent
    return found


def _sets(path: Path, key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in flatten(yaml.safe_load(path.read_text()) or {}))


def _reason(key: str, recipe: Recipe, files: list[Path], notes: dict[Path, dict[str, str]],
            inherited: str | None) -> tuple[str | None, str]:
    for path in files:  # the recipe or variant first, then what it pulls in
        for noted, reason in notes[path].items():
            if key == noted or key.startswith(noted + "."):
                return reason, str(path.relative_to(root()))
    for pattern, reason in BY_DESIGN.items():
        if fnmatch.fnmatchcase(key, pattern):
            return reason, "BY_DESIGN"
    # a recipe made from another one (make cp, or a stand-in) may explain once what it keeps of its parent
    parent = [p for p in files if p.is_relative_to(root() / "recipes") and not p.is_relative_to(recipe.folder)]
    if inherited and any(_sets(p, key) for p in parent) and not any(
            _sets(p, key) for p in files if p.is_relative_to(recipe.folder)):
        return inherited, f"{(recipe.folder / FILE).relative_to(root())} inherited_reason"
    return None, ""


def deviations(recipe: Recipe, args: list[str] | None = None) -> list[Deviation]:
    """Every key of the reference whose composed value differs, with its reason (None where none is written)."""
    entry = reference(recipe)
    ours = flatten(compose(recipe, args or [], naming=False))
    files = own_files(recipe.config_name)
    notes = {path: reasons_in(path) for path in files}
    out = []
    for key, theirs in entry["settings"].items():
        mine = ours.get(key, "<absent>")
        if not _same(mine, theirs):
            reason, where = _reason(key, recipe, files, notes, entry.get("inherited_reason"))
            out.append(Deviation(key, mine, theirs, reason, where))
    return out


def unexplained(recipe: Recipe) -> list[str]:
    """One error per deviation without a reason, naming the key, both values and where to write the reason."""
    try:
        found = deviations(recipe)
    except RecipeError as err:
        return [str(err)]
    return [f"'{d.key}' = {d.ours!r} differs from the published run ({reference(recipe)['source']['path']}: "
            f"{d.upstream!r}) with no reason: match it, or add `{MARK} <why>` to the line of the recipe or fragment "
            f"that sets it" for d in found if d.reason is None]


def source_line(recipe: Recipe) -> str:
    source = reference(recipe)["source"]
    return f"{source['repo']} `{source['path']}` at {str(source['commit'])[:12]}"


def table(recipe: Recipe) -> list[str]:
    """The README's "differs from upstream" table of one recipe or variant."""
    rows = [f"Reference: {source_line(recipe)}.", "", "| key | ours | upstream | why |", "| --- | --- | --- | --- |"]
    found = deviations(recipe)
    rows += [f"| `{d.key}` | {_cell(d.ours)} | {_cell(d.upstream)} | {d.reason or 'UNEXPLAINED'} |" for d in found]
    if not found:
        rows.append("| (none) | | | |")
    return rows


def _cell(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    text = text.removesuffix("\n...").removesuffix("...").strip()
    return f"`{text}`" if len(text) <= 40 else f"`{text[:37]}...`"


# ---------------------------------------------------------------- the README section


BEGIN = "<!-- upstream: generated by `make pin` from upstream.yaml and the `# deviation:` comments; edit those -->"
END = "<!-- /upstream -->"


def readme_section(name: str) -> str:
    """The "differs from upstream" section of a recipe's README: its latest version and every variant."""
    from verl_recipes import catalog

    version = catalog.versions(name)[-1]
    lines = [BEGIN, "## Differs from upstream", ""]
    for recipe in (r for r in catalog.all_recipes() if r.name == name and r.version == version):
        lines += [f"### {recipe.label}", "", *table(recipe), ""]
    return "\n".join([*lines, END])


def readme_problem(name: str) -> str | None:
    """Why the README's section is not what the data generates now, or None."""
    path = root() / "recipes" / name / "README.md"
    text = path.read_text() if path.is_file() else ""
    if BEGIN not in text or END not in text:
        return f"recipes/{name}/README.md has no generated 'Differs from upstream' section: run `make pin`"
    current = text[text.index(BEGIN):text.index(END) + len(END)]
    if current != readme_section(name):
        return f"recipes/{name}/README.md: its 'Differs from upstream' section is stale: run `make pin`"
    return None


def write_readme(name: str) -> bool:
    """Put the generated section into the README (replacing the old one, or appending it); True if it changed."""
    path = root() / "recipes" / name / "README.md"
    text = path.read_text()
    section = readme_section(name)
    if BEGIN in text and END in text:
        new = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        new = text.rstrip("\n") + "\n\n" + section + "\n"
    if new != text:
        path.write_text(new)
    return new != text

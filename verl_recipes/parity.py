"""Parity with the published runs our recipes reproduce.

Each recipe version keeps its references as data beside it, `recipes/<name>/<version>/upstream.yaml`:

    recipe:                       # the version's main recipe; a variant has its own entry under `variants:`
      source: {repo: verl-project/verl, path: examples/grpo_trainer/run_qwen3_8b_fsdp.sh, commit: <sha>}
      result: what the run published, and where
      settings: {verl 0.9.1 dotted key: upstream value}     # every override the script passes (verl_recipes/extract.py)
      translated: {legacy key: 0.9.1 key, or "none: why"}   # the same extraction
      inherited_reason: why keys this recipe keeps from a parent recipe (make cp, a stand-in) may differ; a parent
                        that reproduces the same run (the same source) gives its own reasons instead
      declined: {key: why}   # upstream keys no file of ours sets (verl's default stays, or the key has no place)
    variants:
      megatron: {extends: recipe, source: <the recipe's>}   # the same run: every difference is a deviation
      separate_async: {extends: recipe, source: <its own script>, settings: ..., from_recipe: {why, keys}}

Every key where the composed recipe differs from its reference is a deviation, and a deviation needs a reason: a
comment `# deviation: <one line>` on the line of the assignment that wins (the last of our files, in Hydra's
composition order, to set the key), or on the comment line just above it. Where a run's names and logs go is ours
by design everywhere, declared once in BY_DESIGN. A key verl does not read under our config (a KL coefficient with
no KL term, a micro-batch size under dynamic batching) is INERT; a key of verl's default that copies another one
(ref.megatron.* follow the actor) takes the reason of the key it copies. `make <recipe>-upstream` prints the deviations; `make check`
fails a published recipe with an unexplained one, naming the key and the file to write the reason in; each recipe
README's "differs from upstream" table is generated from the same data.
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from verl_recipes import yaml_parser
from verl_recipes.catalog import REPO, Recipe, RecipeError, data_dir, root
from verl_recipes.catalog import UPSTREAM as FILE
from verl_recipes.compose import compose, composition_files, flatten, resolved

MARK = "# deviation:"
# Where a run's names, checkpoints and logs go: ours by design in every recipe, declared once. Nothing that changes
# what is trained (data, model, reward) is here: each of those is a deviation with its own reason.
BY_DESIGN = {
    "trainer.project_name": "run names derive from the recipe folder (verl_recipes/compose.py)",
    "trainer.experiment_name": "run names derive from the recipe folder (verl_recipes/compose.py)",
    "trainer.default_local_dir": "checkpoints go to the run folder the launcher picks",
    "trainer.logger": "console + file by default (the smoke gates and reports read the file); configs/logging/* add "
                      "wandb, tensorboard or mlflow",
    "trainer.rollout_data_dir": "set per run by the user",
    "ray_kwargs.ray_init.runtime_env.py_executable": "the launcher runs verl from this repository's virtual environment; "
                                                     "verl's scripts `uv run` inside a verl checkout",
}
# Keys verl 0.9.1 does not read while our composed config has the switches beside them at the values given: a
# difference there changes nothing in our run (a difference in a switch itself is a deviation of its own, with its
# reason). Checked before any written reason: a key verl never reads needs none.
_NO_KL_LOSS = {"actor_rollout_ref.actor.use_kl_loss": False}
_DYNAMIC = "with dynamic batching verl splits micro-batches by tokens and never reads it (verl/workers/engine/utils.py:108-128)"
_V1_DAPO = {"trainer.use_v1": True, "algorithm.filter_groups.enable": True}
INERT = {
    "actor_rollout_ref.actor.kl_loss_coef": (_NO_KL_LOSS, "no KL loss, so verl never reads it (verl/workers/utils/losses.py:132)"),
    "actor_rollout_ref.actor.kl_loss_type": (_NO_KL_LOSS, "no KL loss, so verl never reads it (verl/workers/utils/losses.py:132)"),
    "algorithm.kl_ctrl.*": ({"algorithm.use_kl_in_reward": False},
                            "no KL in the reward, so verl builds no KL controller (verl/trainer/ppo/ray_trainer.py:364)"),
    "actor_rollout_ref.ref.*": ({**_NO_KL_LOSS, "algorithm.use_kl_in_reward": False},
                                "no KL term, so verl builds no reference model (verl/trainer/ppo/utils.py:75-79)"),
    "critic.*": ({"critic.enable": None, "algorithm.adv_estimator": "grpo"},
                 "GRPO advantages need no critic, so verl builds none (verl/trainer/ppo/utils.py:96-107)"),
    "data.gen_batch_size": (_V1_DAPO, "with dynamic sampling 0.9.1's V1 replay buffer dispatches prompts one at a time and "
                                      "never reads it (verl/trainer/ppo/v1/trainer_base.py:178-181); in-flight prompts "
                                      "are bounded by filter_groups.max_inflight_gen_batches"),
    "algorithm.filter_groups.max_num_gen_batches": (
        _V1_DAPO, "0.9.1's V1 replay buffer ignores it and warns (verl/trainer/ppo/v1/trainer_base.py:205-211); "
                  "filter_groups.max_inflight_gen_batches bounds generation instead"),
    "data.return_multi_modal_inputs": ({}, "stored by RLHFDataset and read by no verl 0.9.1 code "
                                           "(verl/utils/dataset/rl_dataset.py:155)"),
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": ({"actor_rollout_ref.actor.use_dynamic_bsz": True}, _DYNAMIC),
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": (
        {"actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": True}, _DYNAMIC),
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": (
        {"actor_rollout_ref.ref.log_prob_use_dynamic_bsz": True}, _DYNAMIC),
}
# `${a.b}` or `${oc.select:a.b,default}`: a key whose value copies another one (verl's ref.* follow the actor's)
_COPY = re.compile(r"\$\{(?:oc\.select:)?([A-Za-z_][\w.]*)(?:,[^}]*)?\}")


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
    """The upstream record of the recipe (or its variant), `extends` resolved: {source, result, settings, ...}.

    A variant that `extends: recipe` with the recipe's own source is the recipe's run: its reference is the
    recipe's. One that cites a script of its own takes that script's settings over the recipe's, except the keys
    its `from_recipe` lists (that script's workload, where the variant runs the recipe's): those stay the recipe's.
    """
    path = upstream_file(recipe)
    if not path.is_file() and not recipe.published:  # an unpublished `make cp` copy inherits its source's record
        from verl_recipes import catalog

        return reference(catalog.parse(recipe.card["derived_from"]))
    if not path.is_file():
        raise RecipeError(f"{path.relative_to(root())} is missing: record the published run this version reproduces")
    data = yaml_parser.safe_load(path.read_text()) or {}
    entry = (data.get("variants") or {}).get(recipe.variant) if recipe.variant else data.get("recipe")
    if entry is None:
        where = f"variants.{recipe.variant}" if recipe.variant else "recipe"
        raise RecipeError(f"{path.relative_to(root())} has no `{where}` entry: record the published run it follows")
    if entry.get("extends") == "recipe":
        base = data.get("recipe") or {}
        own = entry.get("settings") or {}
        kept = _from_recipe(entry, own, f"{path.relative_to(root())} variants.{recipe.variant}")
        entry = {**base, **entry,
                 "settings": {**(base.get("settings") or {}), **{k: v for k, v in own.items() if k not in kept}},
                 "translated": {**(base.get("translated") or {}), **(entry.get("translated") or {})},
                 "declined": {**(base.get("declined") or {}), **(entry.get("declined") or {})}}
    for field in ("source", "settings"):
        if not entry.get(field):
            raise RecipeError(f"{path.relative_to(root())}: the entry for {recipe.label} needs `{field}`")
    return entry


def _from_recipe(entry: dict, own: dict, where: str) -> list[str]:
    """The keys of a variant's own script that it leaves to the recipe's reference; each must be in that script."""
    block = entry.get("from_recipe")
    if not block:
        return []
    if not block.get("why") or not block.get("keys"):
        raise RecipeError(f"{where}: from_recipe needs `why` and `keys`")
    stale = [k for k in block["keys"] if k not in own]
    if stale:
        raise RecipeError(f"{where}: from_recipe lists {', '.join(stale)}, which its script does not set")
    return list(block["keys"])


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


def _noted(notes: dict[str, str], key: str) -> str | None:
    """The reason a file writes for a key, or for a block above it."""
    for noted, reason in notes.items():
        if key == noted or key.startswith(noted + "."):
            return reason
    return None


def _winner(key: str, files: list[Path], keys_of: dict[Path, set[str]]) -> Path | None:
    """The last of our files, in composition order, that sets the key (or a block above it): its value lands."""
    for path in reversed(files):
        if any(key == k or key.startswith(k + ".") for k in keys_of[path]):
            return path
    return None


def _inert(key: str, ours: dict) -> str | None:
    for pattern, (switches, why) in INERT.items():
        if fnmatch.fnmatchcase(key, pattern) and all(_same(ours.get(k), v) for k, v in switches.items()):
            return why
    return None


def _parent_source(winner: Path) -> dict | None:
    """The source of the run that the recipe version holding this file reproduces."""
    path = winner.parent / FILE
    data = yaml_parser.safe_load(path.read_text()) if path.is_file() else None
    return ((data or {}).get("recipe") or {}).get("source")


def _reason(key: str, recipe: Recipe, winner: Path | None, entry: dict) -> tuple[str | None, str]:
    """(reason, where): the `# deviation:` beside the assignment that wins, never one from a file it overrides."""
    for pattern, reason in BY_DESIGN.items():
        if fnmatch.fnmatchcase(key, pattern):
            return reason, "BY_DESIGN"
    if winner is None:  # verl's default, or a key our composition has no place for: upstream.yaml says why
        declined = (entry.get("declined") or {}).get(key)
        return (declined, f"{(recipe.folder / FILE).relative_to(root())} declined") if declined \
            else (None, "verl's default: set it in the recipe with a reason, or say why under `declined`")
    where = str(winner.relative_to(root()))
    if winner.is_relative_to(root() / "recipes") and not winner.is_relative_to(recipe.folder):
        if _parent_source(winner) == entry["source"]:  # the parent reproduces the same run: its reasons hold
            return _noted(reasons_in(winner), key), where
        # a recipe made from another one (make cp, or a stand-in) explains once what it keeps of its parent
        inherited = entry.get("inherited_reason")
        return (inherited, f"{(recipe.folder / FILE).relative_to(root())} inherited_reason") if inherited \
            else (None, where)
    return _noted(reasons_in(winner), key), where


_memo: dict | None = None


@contextlib.contextmanager
def memoized():
    """Within one `make check` no file changes, so a recipe's deviations, which its README table and its unexplained
    check both read, are composed once."""
    global _memo
    _memo = {}
    try:
        yield
    finally:
        _memo = None


def deviations(recipe: Recipe, args: list[str] | None = None) -> list[Deviation]:
    """Every key of the reference whose composed value differs, with its reason (None where none is written)."""
    if _memo is None:
        return _deviations(recipe, args)
    key = (str(root()), recipe.label, tuple(args or []))
    if key not in _memo:
        _memo[key] = _deviations(recipe, args)
    return list(_memo[key])


def _deviations(recipe: Recipe, args: list[str] | None) -> list[Deviation]:
    entry = reference(recipe)
    composed = compose(recipe, args or [], naming=False, resolve=False)
    ours, raw = flatten(resolved(composed, recipe)), flatten(composed)
    files = composition_files(recipe, args or [])
    keys_of = {path: {k.replace("+", "") for k in flatten(yaml_parser.safe_load(path.read_text()) or {})} for path in files}
    out = []
    for key, theirs in entry["settings"].items():
        mine = ours.get(key, "<absent>")
        if not _same(mine, theirs):
            winner = _winner(key, files, keys_of)
            inert = _inert(key, ours)
            if inert:
                out.append(Deviation(key, mine, theirs, inert, "INERT"))
                continue
            source = _copied_from(key, raw, entry["settings"]) if winner is None else None
            if source:  # verl's default copies another key (ref.* follow the actor): that key's reason holds
                reason, where = _reason(source, recipe, _winner(source, files, keys_of), entry)
                out.append(Deviation(key, mine, theirs, reason and f"follows {source}: {reason}", where))
                continue
            reason, where = _reason(key, recipe, winner, entry)
            out.append(Deviation(key, mine, theirs, reason, where))
    return out


def _copied_from(key: str, raw: dict, theirs: dict) -> str | None:
    """The key whose value this one copies through verl's interpolation, followed to the last link, when the
    published run gives both the same value (else the copy is no explanation of the difference)."""
    source, seen = key, {key}
    while (match := _COPY.fullmatch(str(raw.get(source, "")))) and match.group(1) not in seen:
        source = match.group(1)
        seen.add(source)
    if source == key or source not in theirs or not _same(theirs[source], theirs[key]):
        return None
    return source


def unexplained(recipe: Recipe, strict: bool = True) -> list[str]:
    """One error per deviation without a reason, naming the key, both values and the file that sets ours.
    A published recipe is strict; strict=False (a user's copy) shows its deviations for information only."""
    try:
        found = deviations(recipe)
    except RecipeError as err:
        return [str(err)]
    if not strict:
        return []
    return [f"'{d.key}' = {d.ours!r} differs from the published run ({reference(recipe)['source']['path']}: "
            f"{d.upstream!r}) with no reason: match it, or add `{MARK} <why>` beside the assignment that wins "
            f"({d.where})" for d in found if d.reason is None]


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
    # the data folder and the checkout as the pins write them, so the README is the same on every machine
    text = text.replace(str(data_dir()), "<RL_DATA_DIR>").replace(str(REPO), "<repo>")
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

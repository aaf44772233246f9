"""`make diff A=<recipe> B=<recipe>`: the keys whose composed values differ. A key whose value B takes from another
key (verl's `rollout_n: ${oc.select:actor_rollout_ref.rollout.n,1}`, our `${tokens:...}`) is marked derived, so a
one-key edit reads as one key set and the copies that follow it."""

from __future__ import annotations

from dataclasses import dataclass

from verl_recipes.catalog import Recipe
from verl_recipes.compose import compose, flatten

ABSENT = "<absent>"


@dataclass(frozen=True)
class Change:
    key: str
    a: object
    b: object
    derived: str | None  # B's interpolation where B derives the value from other keys, else None


def changes(a: Recipe, b: Recipe) -> list[Change]:
    ours, theirs = (flatten(compose(r, naming=False)) for r in (a, b))
    written = flatten(compose(b, naming=False, resolve=False))  # B as written, interpolations kept
    out = []
    for key in sorted(ours.keys() | theirs.keys()):
        if ours.get(key, ABSENT) != theirs.get(key, ABSENT):
            raw = written.get(key)
            derived = raw if isinstance(raw, str) and "${" in raw else None
            out.append(Change(key, ours.get(key, ABSENT), theirs.get(key, ABSENT), derived))
    return out


def report(found: list[Change]) -> list[str]:
    lines = [f"{c.key}: {c.a!r} -> {c.b!r}" + (f"  (derived: {c.derived})" if c.derived else "") for c in found]
    derived = sum(c.derived is not None for c in found)
    return [*lines, f"{len(found) - derived} key(s) set differently" + (f", {derived} derived from them" if derived else "")]

"""Recipe discovery: everything is read from the filesystem, nothing is listed by hand.

Layout:
    recipes/<name>/<version>/recipe.yaml     the recipe (a Hydra config over verl's ppo_trainer)
    recipes/<name>/<version>/<variant>.yaml  a variant: inherits recipe.yaml and changes one thing
    recipes/<name>/<version>/card.yaml       the machine-readable card (status, hardware, data, entry point)
    recipes/<name>/<version>/checks.yaml     its smoke metric gates
    recipes/<name>/<version>/upstream.yaml   the published runs it reproduces (verl_recipes/parity.py)
    recipes/<name>/<version>/resolved/       its pinned resolved configs (verl_recipes/pins.py)
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from verl_recipes import yaml_parser

REPO = Path(__file__).resolve().parent.parent


def root() -> Path:
    """Where recipes/, configs/ and models/ live: this repo, or RL_RECIPE_ROOT (tests use a scratch copy)."""
    return Path(os.environ.get("RL_RECIPE_ROOT", REPO)).resolve()


def data_dir() -> Path:
    """Where prepared datasets live: RL_DATA_DIR (absolute, so recipes and data prep name the same files) or data/."""
    return Path(os.environ.get("RL_DATA_DIR") or REPO / "data").expanduser().resolve()


def models_dir() -> Path:
    """Where model folders prepared from a packaged GGUF live (verl_recipes/models.py): RL_MODELS_DIR or
    <data dir>/models. A recipe names one as ${models:<hub id>}."""
    return Path(os.environ.get("RL_MODELS_DIR") or data_dir() / "models").expanduser().resolve()


def recipes_dir() -> Path:
    return root() / "recipes"
CARD = "card.yaml"
CHECKS = "checks.yaml"  # smoke metric gates (verl_recipes/check/gates.py)
UPSTREAM = "upstream.yaml"  # the published runs a version reproduces (verl_recipes/parity.py)
MAIN = "recipe"
DEFAULT_ENTRYPOINT = "verl.trainer.main_ppo"
NODE_GPUS = 8  # the node every card in this repo targets: 8 GPUs of the 80 GB class (H100/H200)
CARD_STATUSES = ("unverified", "smoke-verified (tiny model, 1 GPU)", "smoke-verified (tiny model, 2 GPUs)", "verified", "broken")
# earned only by a committed node record that passed at the recipe's own batch (verl_recipes/node/status.py; the card
# says exactly what its records earn: tests/test_node_status.py)
NODE_VERIFIED = re.compile(r"node-verified \(real shape, random init, \d+ x [A-Z0-9]+(, \d+( of \d+)? layers)?\)")


class RecipeError(Exception):
    """A recipe, card or override is wrong; the message says what to do."""


@dataclass(frozen=True)
class Recipe:
    name: str
    version: str
    variant: str | None = None
    card: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def folder(self) -> Path:
        return recipes_dir() / self.name / self.version

    @property
    def config_name(self) -> str:
        """The Hydra config name, relative to the repo root (the primary config dir)."""
        return f"recipes/{self.name}/{self.version}/{self.variant or MAIN}"

    @property
    def config_file(self) -> Path:
        return root() / f"{self.config_name}.yaml"

    @property
    def label(self) -> str:
        """`name/version[:variant]`, as printed and as accepted on the command line."""
        return f"{self.name}/{self.version}" + (f":{self.variant}" if self.variant else "")

    @property
    def run_name(self) -> str:
        """Run and folder name: `name-version[-variant]`."""
        return f"{self.name}-{self.version}" + (f"-{self.variant}" if self.variant else "")

    def _variant_entry(self) -> dict:
        return (self.card.get("variants") or {}).get(self.variant) or {} if self.variant else {}

    def card_value(self, key: str, default=None):
        """A card field, where a variant's own entry under `variants:` wins over the version's."""
        return self._variant_entry().get(key, self.card.get(key, default))

    def own_card_value(self, key: str, default=None):
        """A card field of this very recipe, never inherited: a variant's own entry, or the version's for the base
        (e.g. `learns:`, which only a run of that recipe itself can earn)."""
        return (self._variant_entry() if self.variant else self.card).get(key, default)

    @property
    def published(self) -> bool:
        """Published recipes are held to their pins and explain every deviation from upstream; a `make cp` copy is
        not (card `published: false`) until `make <name>-publish`."""
        return self.card.get("published", True) is not False

    @property
    def entrypoint(self) -> str:
        return self.card_value("entrypoint", DEFAULT_ENTRYPOINT)

    @property
    def node_gpus(self) -> int:
        """GPUs of one node of the card's hardware (default 8): what the topology rules place pools on."""
        return int(self.card_value("node_gpus", NODE_GPUS))


def model_config_dir(model_path: str) -> Path | None:
    """A model's folder with its config.json: a local model folder, or the committed models/<hub id>/ (also for a
    folder $RL_MODELS_DIR/<hub id> not yet prepared, so a recipe is proven before its model is made)."""
    local = Path(str(model_path)).expanduser()
    if (local / "config.json").is_file():
        return local
    hub_id = str(model_path)
    if local.resolve().is_relative_to(models_dir()):
        hub_id = str(local.resolve().relative_to(models_dir()))
    committed = root() / "models" / hub_id
    return committed if (committed / "config.json").is_file() else None


def hf_config(model_path: str) -> dict:
    """The model's config.json as a dict ({} when neither a local folder nor models/ has it)."""
    folder = model_config_dir(model_path)
    return json.loads((folder / "config.json").read_text()) if folder else {}


def _version_key(version: str) -> int:
    return int(version[1:])


def names() -> list[str]:
    return sorted(p.name for p in recipes_dir().iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def versions(name: str) -> list[str]:
    folder = recipes_dir() / name
    if not folder.is_dir():
        close = difflib.get_close_matches(name, names(), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        known = ", ".join(names()) or "none"
        raise RecipeError(f"no recipe '{name}' under recipes/ ({hint}known: {known}); `make list` shows them all")
    found = [p.name for p in folder.iterdir() if p.is_dir() and re.fullmatch(r"v\d+", p.name)]
    if not found:
        raise RecipeError(f"recipes/{name}/ has no version folder (v1, v2, ...)")
    return sorted(found, key=_version_key)


def load_card(name: str, version: str) -> dict:
    path = recipes_dir() / name / version / CARD
    if not path.is_file():
        raise RecipeError(f"{path} is missing: every recipe version needs a card")
    card = yaml_parser.safe_load(path.read_text()) or {}
    if card.get("status") not in CARD_STATUSES and not NODE_VERIFIED.fullmatch(str(card.get("status"))):
        raise RecipeError(f"{path}: status must be one of {CARD_STATUSES} or 'node-verified (real shape, random init, "
                          f"G x GPU[, L of N layers])', got {card.get('status')!r}")
    return card


def variants(name: str, version: str) -> list[str]:
    folder = recipes_dir() / name / version
    return sorted(p.stem for p in folder.glob("*.yaml") if p.name not in (f"{MAIN}.yaml", CARD, CHECKS, UPSTREAM))


def get(name: str, version: str | None = None, variant: str | None = None) -> Recipe:
    """Look up one recipe; version defaults to the latest."""
    all_versions = versions(name)
    version = version or all_versions[-1]
    if version not in all_versions:
        raise RecipeError(f"recipe '{name}' has no version '{version}' (has: {', '.join(all_versions)}); use V=<version>")
    if variant and variant not in variants(name, version):
        have = ", ".join(variants(name, version)) or "none"
        raise RecipeError(f"recipe '{name}/{version}' has no variant '{variant}' (has: {have}); use VARIANT=<variant>")
    return Recipe(name, version, variant or None, load_card(name, version))


def parse(spec: str) -> Recipe:
    """Parse `name[/version][:variant]`."""
    match = re.fullmatch(r"([A-Za-z0-9][\w.-]*?)(?:/(v\d+))?(?::([\w-]+))?", spec)
    if not match:
        raise RecipeError(f"cannot read recipe '{spec}': expected name[/vN][:variant], e.g. qwen25-7b-grpo/v1:megatron")
    return get(*match.groups())


def all_recipes() -> list[Recipe]:
    """Every recipe, every version, every variant."""
    out = []
    for name in names():
        for version in versions(name):
            card = load_card(name, version)
            out.append(Recipe(name, version, None, card))
            out.extend(Recipe(name, version, v, card) for v in variants(name, version))
    return out

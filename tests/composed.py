"""The repository's recipes composed once per test session (per xdist worker) and shared by every test module that
reads them. Read-only: a test that edits one fails instead of changing what the others read (copy.deepcopy it and
set_readonly(copy, False) to break a copy). A test that edits a recipe's files composes its scratch copy itself."""

from functools import cache

from omegaconf import DictConfig, OmegaConf

from verl_recipes import catalog
from verl_recipes.compose import compose


@cache
def composed(name: str, variant: str | None = None, args: tuple[str, ...] = (), version: str | None = None,
             resolve: bool = True) -> DictConfig:
    """`name` (its latest version unless `version`, or its `variant`) with `args`, without run names; `resolve=False`
    keeps the interpolations, as the schema checks compare keys."""
    cfg = compose(catalog.get(name, version, variant), list(args), naming=False, resolve=resolve)
    OmegaConf.set_readonly(cfg, True)
    return cfg

"""A copy of a whole OmegaConf config through pickle: about 3x faster than copy.deepcopy, which visits every node in
Python (deep copies were about a third of `make check`'s time: Hydra's loaded files, the named composition, the
config verl's dataclasses are built from). Only a root: a node inside a config pickles its parents with it, so it is
deep-copied as before."""

from __future__ import annotations

import pickle

from omegaconf import Container


def copy_config(cfg: Container) -> Container:
    if cfg._get_parent() is not None:
        raise ValueError("copy_config copies a whole config; copy.deepcopy a node inside one")
    return pickle.loads(pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL))

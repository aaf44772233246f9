"""copy_config: a whole config copied through pickle is the config, with its flags, and shares nothing with it."""

import copy

import pytest
from omegaconf import OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError

from verl_recipes.config_copy import copy_config


def test_a_copy_keeps_values_interpolations_and_flags_and_shares_nothing():
    cfg = OmegaConf.create({"a": {"b": 1, "c": "${a.b}", "xs": [1, {"d": 2}]}, "e": None})
    OmegaConf.set_struct(cfg, True)
    OmegaConf.set_readonly(cfg.a.xs, True)
    copied = copy_config(cfg)
    assert OmegaConf.to_yaml(copied) == OmegaConf.to_yaml(cfg) and copied.a.c == 1
    assert OmegaConf.is_struct(copied) and OmegaConf.is_readonly(copied.a.xs)
    with pytest.raises(ConfigAttributeError):  # struct mode came along: an unknown key is refused
        copied.a.unknown = 1
    with open_dict(copied):
        copied.a.b = 5
    assert cfg.a.b == 1 and copied.a.c == 5  # the copy's interpolation reads the copy
    assert copied.a._get_parent() is copied


def test_a_node_inside_a_config_is_refused():
    cfg = OmegaConf.create({"a": {"b": 1}})
    with pytest.raises(ValueError, match="copy.deepcopy a node"):
        copy_config(cfg.a)
    assert copy.deepcopy(cfg.a).b == 1

"""What a machine lacks becomes settings: the configs fragments the launcher adds where flash-attn or apex's CUDA
extension does not import (verl_recipes/check/preflight.py fallback_overrides), for FSDP and Megatron recipes, and
the packages a Megatron launch checks for, each named with the pin that provides it."""

import re

import pytest

from verl_recipes import catalog
from verl_recipes.check.preflight import MEGATRON_PACKAGES, fallback_overrides, required_packages
from verl_recipes.compose import compose


def nothing(module: str) -> bool:
    return False


def everything(module: str) -> bool:
    return True


# qwen3-vl-30b-a3b-geo3k-dapo turns gradient_accumulation_fusion on itself: the fragment still wins
@pytest.mark.representative
@pytest.mark.parametrize("name", ["qwen3-30b-a3b-grpo", "qwen25-7b-grpo:megatron", "qwen3-vl-30b-a3b-geo3k-dapo"])
def test_a_megatron_recipe_without_flash_attn_or_apex_gets_fused_attention_and_no_fusion(name):
    recipe = catalog.parse(name)
    cfg = compose(recipe)
    overrides = [override for override, _ in fallback_overrides(cfg, nothing)]
    assert overrides == ["+configs/attention=megatron_fused", "+configs/apex=absent"]
    assert fallback_overrides(cfg, everything) == []

    fixed = compose(recipe, overrides)  # resolved: the reference's oc.select of the actor's block included
    for role in (fixed.actor_rollout_ref.actor, fixed.actor_rollout_ref.ref, fixed.critic):
        assert role.megatron.override_transformer_config.attention_backend == "fused"
        assert role.megatron.override_transformer_config.gradient_accumulation_fusion is False
    assert fallback_overrides(compose(recipe, overrides), nothing) == []  # added once


def test_a_recipe_that_needs_neither_package_gets_no_fragment():
    cfg = compose(catalog.get("qwen3-30b-a3b-grpo"), [
        "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=auto",
        "++actor_rollout_ref.actor.megatron.override_transformer_config.gradient_accumulation_fusion=false"])
    assert fallback_overrides(cfg, nothing) == []


def test_an_fsdp_recipe_needs_no_apex():
    overrides = fallback_overrides(compose(catalog.get("qwen25-7b-grpo")), nothing)
    assert overrides == [("+configs/attention=torch_varlen", "flash-attn")]


def test_a_megatron_launch_checks_every_package_of_the_set_and_names_its_pin():
    needs = required_packages(compose(catalog.parse("qwen25-7b-grpo:megatron")))
    assert MEGATRON_PACKAGES.items() <= needs.items()
    assert "flash_attn" not in needs and "apex" not in needs  # the fragments stand in for them
    for module, hint in MEGATRON_PACKAGES.items():
        pin, file = re.match(r"([\w.\[\]-]+==[\w.]+).*?\((requirements/[\w.-]+)", hint).groups()
        lines = (catalog.REPO / file).read_text().splitlines()
        assert pin in lines, f"{module}: {pin} is not a line of {file}"


@pytest.mark.slow
def test_a_dry_megatron_launch_on_this_machine_adds_both_fragments_and_says_so(capsys, run_env):
    from importlib.util import find_spec

    from verl_recipes.launch import plan_launch

    if find_spec("flash_attn") is not None or find_spec("fused_weight_gradient_mlp_cuda") is not None:
        pytest.skip("flash-attn or apex is installed here: nothing to replace")
    plan = plan_launch(catalog.parse("qwen25-7b-grpo:megatron"), [], dry=True)
    assert plan.args[-2:] == ["+configs/attention=megatron_fused", "+configs/apex=absent"]
    assert plan.cfg.actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend == "fused"
    out = capsys.readouterr().out
    assert "flash-attn is not installed here: adding +configs/attention=megatron_fused" in out
    assert "apex's CUDA extension is not installed here: adding +configs/apex=absent" in out
    assert "backend fused" in "\n".join(plan.describe())


@pytest.mark.slow  # a full check against verl: about 10 s on a quiet 2-core machine
def test_liger_kernels_are_a_fragment_verl_accepts_and_a_package_the_launch_checks():
    from verl_recipes.check.recipe import check

    recipe = catalog.parse("retool-qwen25-7b")  # Liger not measured for it: off unless asked for
    assert "liger_kernel" not in required_packages(compose(recipe))
    cfg = compose(recipe, ["+configs/kernels=liger"])
    assert cfg.actor_rollout_ref.model.use_liger is True
    assert check(recipe, ["+configs/kernels=liger"]) == []  # verl 0.9.1's schema and start-up asserts take it
    assert required_packages(cfg)["liger_kernel"].startswith("liger-kernel (requirements/gpu.txt")
    # qwen25-7b-grpo composes the fragment itself (measured: bench/README.md); its Megatron variant has no Liger path
    grpo = compose(catalog.parse("qwen25-7b-grpo"))
    assert grpo.actor_rollout_ref.model.use_liger is True and "liger_kernel" in required_packages(grpo)
    megatron = compose(catalog.parse("qwen25-7b-grpo:megatron"))
    assert megatron.actor_rollout_ref.model.use_liger is False and "liger_kernel" not in required_packages(megatron)

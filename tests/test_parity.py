"""Parity with the published runs (verl_recipes/parity.py): every recipe and variant has a reference, every
deviation a reason, an unexplained one is named by make check, and the values upstream gets right are ours too."""

import pytest

from verl_recipes import catalog, cli, parity
from verl_recipes.compose import compose


@pytest.mark.slow
@pytest.mark.parametrize("recipe", catalog.all_recipes(), ids=lambda r: r.label)
def test_every_recipe_has_a_reference_and_every_deviation_a_reason(recipe):
    entry = parity.reference(recipe)
    assert entry["source"]["repo"] and entry["source"]["path"] and len(str(entry["source"]["commit"])) == 40
    assert parity.unexplained(recipe) == []


def test_an_unexplained_deviation_is_named_and_a_written_reason_explains_it(scratch_root, capsys):
    recipe_file = scratch_root / "recipes/qwen25-7b-grpo/v1/recipe.yaml"
    recipe_file.write_text(recipe_file.read_text().replace("lr: 1.0e-6", "lr: 3.0e-6"))
    [error] = parity.unexplained(catalog.get("qwen25-7b-grpo"))
    assert error.startswith("'actor_rollout_ref.actor.optim.lr' = 3e-06 differs from the published run "
                            "(examples/grpo_trainer/run_qwen3_8b_fsdp.sh: 1e-06) with no reason")
    assert cli.main(["upstream", "qwen25-7b-grpo"]) == 1
    assert "UNEXPLAINED" in capsys.readouterr().out
    recipe_file.write_text(recipe_file.read_text().replace("lr: 3.0e-6", "lr: 3.0e-6  # deviation: a test says so"))
    assert parity.unexplained(catalog.get("qwen25-7b-grpo")) == []
    assert cli.main(["upstream", "qwen25-7b-grpo"]) == 0
    assert "a test says so [recipes/qwen25-7b-grpo/v1/recipe.yaml]" in capsys.readouterr().out


@pytest.mark.slow
def test_the_reason_printed_is_the_one_beside_the_value_that_lands(scratch_root):
    key = "actor_rollout_ref.rollout.gpu_memory_utilization"
    recipe = catalog.get("qwen25-7b-grpo", variant="megatron")
    [fragment] = [d for d in parity.deviations(recipe) if d.key == key]
    assert fragment.where == "configs/rollout/vllm.yaml" and fragment.reason
    variant = scratch_root / "recipes/qwen25-7b-grpo/v1/megatron.yaml"
    text = variant.read_text()
    variant.write_text(text + "  rollout:\n    gpu_memory_utilization: 0.5\n")  # the variant now sets the value
    [bare] = [d for d in parity.deviations(recipe) if d.key == key]
    assert (bare.ours, bare.reason, bare.where) == (0.5, None, "recipes/qwen25-7b-grpo/v1/megatron.yaml")
    variant.write_text(text + "  rollout:\n    gpu_memory_utilization: 0.5  # deviation: the variant's own reason\n")
    [own] = [d for d in parity.deviations(recipe) if d.key == key]
    assert own.reason == "the variant's own reason"


@pytest.mark.slow
def test_a_key_verl_does_not_read_under_our_switch_is_inert_and_only_then(scratch_root):
    key = "actor_rollout_ref.actor.kl_loss_coef"
    recipe = catalog.get("retool-qwen25-7b")  # no KL loss; verl-recipe's ReTool passes kl_loss_coef=0.0
    [inert] = [d for d in parity.deviations(recipe) if d.key == key]
    assert (inert.ours, inert.upstream, inert.where) == (0.001, 0.0, "INERT") and "losses.py" in inert.reason
    recipe_file = scratch_root / "recipes/retool-qwen25-7b/v1/recipe.yaml"
    recipe_file.write_text(recipe_file.read_text().replace("  actor:\n", "  actor:\n    use_kl_loss: true\n", 1))
    [live] = [d for d in parity.deviations(recipe) if d.key == key]
    assert live.reason is None and live.where != "INERT"  # with the KL loss on, the coefficient counts


def test_a_key_that_copies_another_takes_that_keys_reason():
    recipe = catalog.get("qwen3-30b-a3b-grpo")  # verl's ref.megatron.* follow the actor's
    found = {d.key: d for d in parity.deviations(recipe)}
    actor, ref = (found[f"actor_rollout_ref.{role}.megatron.tensor_model_parallel_size"] for role in ("actor", "ref"))
    assert ref.reason == f"follows actor_rollout_ref.actor.megatron.tensor_model_parallel_size: {actor.reason}"
    assert ref.where == actor.where and actor.reason


def test_reasons_are_read_beside_or_above_the_key(tmp_path):
    path = tmp_path / "fragment.yaml"
    path.write_text(
        "# @package _global_\n"
        "actor_rollout_ref:\n"
        "  model:\n"
        "    custom_chat_template: |-\n"
        "      {{ x }}  # deviation: not a key, inside a block scalar\n"
        "    path: m  # deviation: inline\n"
        "  rollout:\n"
        "    # deviation: on the line above\n"
        "    n: 5\n"
        "    val_kwargs:\n"
        "      top_p: 0.7\n"
        "+data:\n"
        "  max: 1 # deviation: a key with a plus\n")
    assert parity.reasons_in(path) == {"actor_rollout_ref.model.path": "inline",
                                       "actor_rollout_ref.rollout.n": "on the line above",
                                       "data.max": "a key with a plus"}


def test_a_recipe_without_a_reference_is_refused(scratch_root):
    (scratch_root / "recipes/qwen3-30b-a3b-grpo/v1/upstream.yaml").unlink()
    [error] = parity.unexplained(catalog.get("qwen3-30b-a3b-grpo"))
    assert "upstream.yaml is missing: record the published run" in error


# ---------------------------------------------------------------- the values fixed against upstream


def test_vl_grpo_baseline_takes_verls_vl_kl_coefficient():
    cfg = compose(catalog.get("qwen25-vl-7b-geo3k-dapo", variant="grpo"))
    actor = cfg.actor_rollout_ref.actor
    assert actor.use_kl_loss and actor.kl_loss_coef == 0.01 and actor.kl_loss_type == "low_var_kl"
    assert compose(catalog.get("qwen25-7b-grpo")).actor_rollout_ref.actor.kl_loss_coef == 0.001


@pytest.mark.representative
@pytest.mark.parametrize("name, variant", [("qwen25-vl-7b-geo3k-dapo", None), ("qwen3-vl-8b-geo3k-dapo", None),
                                           ("qwen25-vl-7b-geo3k-dapo", "separate_async"),
                                           ("qwen3-vl-30b-a3b-geo3k-dapo", None)])
def test_dapo_recipes_take_every_dapo_scripts_optimizer_clip_and_validation(name, variant):
    cfg = compose(catalog.get(name, variant=variant))
    actor, val = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout.val_kwargs
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert (actor.optim.lr_warmup_steps, actor.optim.weight_decay) == (10, 0.1)
    assert (val.do_sample, val.temperature, val.top_p, val.n) == (True, 1.0, 0.7, 1)
    assert cfg.trainer.log_val_generations == 10


@pytest.mark.representative
@pytest.mark.parametrize("name", ["qwen3-235b-a22b-grpo", "qwen3-30b-a3b-grpo"])
def test_qwen3_hybrid_models_think_with_a_shaped_length_budget(name):
    cfg = compose(catalog.get(name))
    assert cfg.data.apply_chat_template_kwargs.enable_thinking is True
    assert cfg.data.max_response_length == 8192
    buffer = cfg.reward.reward_kwargs.overlong_buffer_cfg
    assert cfg.reward.reward_manager.name == "dapo" and buffer.enable and 0 < buffer.len < 8192


@pytest.mark.slow
def test_served_results_save_a_hugging_face_folder_and_log_validation_samples():
    deepeyes = compose(catalog.get("deepeyes-qwen25-vl-7b"))
    retool = compose(catalog.get("retool-qwen25-7b"))
    for cfg in (deepeyes, retool):
        assert "hf_model" in cfg.actor_rollout_ref.actor.checkpoint.save_contents
    assert retool.trainer.log_val_generations == 20


@pytest.mark.slow
def test_make_check_composes_a_recipes_deviations_once_and_only_inside_it(monkeypatch):
    """Its README table and its unexplained check read the same list; outside `make check` nothing is kept."""
    calls = []
    real = parity._deviations
    monkeypatch.setattr(parity, "_deviations", lambda recipe, args: calls.append(recipe.label) or real(recipe, args))
    recipe = catalog.get("qwen25-7b-grpo")
    with parity.memoized():
        assert parity.table(recipe)[4:] == parity.table(recipe)[4:] and parity.unexplained(recipe) == []
    assert calls == ["qwen25-7b-grpo/v1"]
    parity.deviations(recipe)
    assert calls == ["qwen25-7b-grpo/v1"] * 2

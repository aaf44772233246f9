"""The geometry3k DAPO recipes for Qwen2.5-VL / Qwen3-VL: the composed values they must hold, the grpo variant's
delta, the rules for verl's pass-through dicts, and the tiny VL models and rows of the one-GPU smoke."""

import io
import json
import random

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from verl_recipes import catalog
from verl_recipes.catalog import REPO
from verl_recipes.check.passthrough import SGLANG_IMAGE
from verl_recipes.check.passthrough import check as open_dict_errors
from verl_recipes.compose import compose, flatten
from verl_recipes.random_models import FUSED_EXPERTS
from verl_recipes.rewards.geo3k import compute_score
from verl_recipes.smoke import tiny_vl
from verl_recipes.smoke.tiny import MODELS

DAPO = "qwen25-vl-7b-geo3k-dapo"
QWEN3 = "qwen3-vl-8b-geo3k-dapo"
QWEN3_MOE = "qwen3-vl-30b-a3b-geo3k-dapo"
# What GRPO and DAPO may set differently: the objective, the sample count, and DAPO's reward shaping.
# actor/ref/critic.rollout_n are verl's own interpolations of rollout.n.
# the objective, and what every DAPO script sets with it (optimizer warm-up and decay, sampled validation)
ALGORITHM_PREFIXES = ("algorithm.", "reward.reward_kwargs.", "reward.reward_manager.name",
                      "actor_rollout_ref.rollout.val_kwargs.")
ALGORITHM_KEYS = {f"actor_rollout_ref.actor.{key}" for key in (
    "use_kl_loss", "kl_loss_coef", "kl_loss_type", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c",
    "loss_agg_mode", "entropy_coeff", "optim.lr_warmup_steps", "optim.weight_decay")} | {
    "actor_rollout_ref.rollout.n", "actor_rollout_ref.actor.rollout_n", "actor_rollout_ref.ref.rollout_n",
    "critic.rollout_n", "trainer.log_val_generations"}
_COMPOSED = {}


def composed(spec: str, *args: str):
    if (spec, args) not in _COMPOSED:
        _COMPOSED[spec, args] = compose(catalog.parse(spec), list(args), naming=False)
    return _COMPOSED[spec, args]


# ------------------------------------------------------------------------------------------------ composed recipes


@pytest.mark.slow
@pytest.mark.parametrize("spec", [DAPO, QWEN3])
def test_dapo_recipe_holds_the_dapo_objective_frozen_vision_and_image_limits(spec):
    cfg = composed(spec)
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    # DAPO: dynamic sampling on the acc our reward emits, clip-higher, token-mean, no KL anywhere, n 16
    assert (cfg.algorithm.adv_estimator, cfg.algorithm.filter_groups.enable, cfg.algorithm.filter_groups.metric) == (
        "grpo", True, "acc")
    assert cfg.algorithm.filter_groups.max_inflight_gen_batches >= 1
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert (actor.use_kl_loss, cfg.algorithm.use_kl_in_reward) == (False, False)
    assert rollout.n == 16
    # overlong shaping through the dapo manager, on the real response length
    reward_kwargs = cfg.reward.reward_kwargs
    assert (cfg.reward.reward_manager.name, reward_kwargs.overlong_buffer_cfg.enable) == ("dapo", True)
    assert reward_kwargs.max_resp_len == cfg.data.max_response_length
    assert 0 < reward_kwargs.overlong_buffer_cfg.len < reward_kwargs.max_resp_len
    assert cfg.reward.custom_reward_function.path == "pkg://verl_recipes.rewards.geo3k"
    # the freeze that works (the 0.9.1 key stays at its default: make check rejects it)
    assert (cfg.actor_rollout_ref.model.external_lib, actor.strategy) == ("verl_recipes.runtime.freeze_vision", "fsdp2")
    assert actor.freeze_vision_tower is False
    # one image per prompt, one pixel budget for verl's processor and vLLM
    assert rollout.limit_images == 1
    assert set(cfg.data.mm_processor_kwargs) == {"min_pixels", "max_pixels"}
    assert rollout.engine_kwargs.vllm.mm_processor_kwargs == cfg.data.mm_processor_kwargs
    # image tokens are part of the prompt, so the token budget covers prompt + response
    assert actor.ppo_max_token_len_per_gpu >= cfg.data.max_prompt_length + cfg.data.max_response_length
    assert open_dict_errors(cfg) == []


def test_geo3k_reward_emits_the_acc_that_dynamic_sampling_filters_on():
    right = compute_score("hiyouga/geometry3k", "<think>base 4, height 6</think> \\boxed{12}", "12")
    wrong = compute_score("hiyouga/geometry3k", "<think>guess</think> \\boxed{13}", "12")
    assert (right["acc"], wrong["acc"]) == (1.0, 0.0)


@pytest.mark.slow
def test_grpo_variant_differs_from_dapo_only_in_algorithm_keys():
    dapo, grpo = flatten(composed(DAPO)), flatten(composed(f"{DAPO}:grpo"))
    changed = {key for key in dapo.keys() | grpo.keys() if dapo.get(key, "<absent>") != grpo.get(key, "<absent>")}
    outside = {key for key in changed if key not in ALGORITHM_KEYS and not key.startswith(ALGORITHM_PREFIXES)}
    assert not outside, f"the grpo variant changes non-algorithm keys: {sorted(outside)}"
    # and it is the talk's GRPO baseline: KL loss on, symmetric clip, no filtering, no overlong shaping, n 5
    assert {key: grpo.get(key) for key in (
        "actor_rollout_ref.actor.use_kl_loss", "actor_rollout_ref.actor.clip_ratio_high",
        "algorithm.filter_groups.enable", "reward.reward_manager.name", "actor_rollout_ref.rollout.n",
        "reward.reward_kwargs.overlong_buffer_cfg.enable")} == {
        "actor_rollout_ref.actor.use_kl_loss": True, "actor_rollout_ref.actor.clip_ratio_high": 0.2,
        "algorithm.filter_groups.enable": False, "reward.reward_manager.name": "naive",
        "actor_rollout_ref.rollout.n": 5, "reward.reward_kwargs.overlong_buffer_cfg.enable": None}


@pytest.mark.slow
def test_qwen3_recipe_is_the_qwen25_recipe_with_another_model():
    qwen25, qwen3 = flatten(composed(DAPO)), flatten(composed(QWEN3))
    changed = {key for key in qwen25.keys() | qwen3.keys() if qwen25.get(key) != qwen3.get(key)}
    assert changed == {"actor_rollout_ref.model.path", "actor_rollout_ref.rollout.prometheus.served_model_name"}
    assert qwen3["actor_rollout_ref.model.path"] == "Qwen/Qwen3-VL-8B-Instruct"


@pytest.mark.slow
def test_moe_recipe_is_the_qwen3_8b_workload_on_megatron():
    """Data, reward, objective, batches, lengths, images, validation and the freeze stay the 8B recipe's: only the
    model, the engine and what the engine needs (layout, memory, MoE kernels, token budgets, rollout split) change."""
    dense, moe = flatten(composed(QWEN3)), flatten(composed(QWEN3_MOE))
    workload = {key for key in dense if key.startswith(("data.", "algorithm.", "reward.", "trainer."))
                or key in ALGORITHM_KEYS or key.startswith("actor_rollout_ref.rollout.val_kwargs.")} | {
        "actor_rollout_ref.model.external_lib", "actor_rollout_ref.rollout.limit_images",
        "actor_rollout_ref.rollout.engine_kwargs.vllm.mm_processor_kwargs.max_pixels",
        "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.optim.lr"}
    assert {key: moe.get(key, "<absent>") for key in workload} == {key: dense[key] for key in workload}
    assert (moe["model_engine"], moe["actor_rollout_ref.model.path"]) == ("megatron", "Qwen/Qwen3-VL-30B-A3B-Instruct")


@pytest.mark.slow
@pytest.mark.parametrize("overlay", ["node", "tiny_gpu"])
def test_smoke_overlays_keep_the_overlong_window_inside_the_response(overlay):
    cfg = composed(DAPO, f"+configs/smoke={overlay}")
    buffer = cfg.reward.reward_kwargs.overlong_buffer_cfg
    assert 0 < buffer.len < cfg.reward.reward_kwargs.max_resp_len == cfg.data.max_response_length
    assert open_dict_errors(cfg) == []


# ------------------------------------------------------------------------------------------------ pass-through rules


def _rules_cfg(**changes):
    cfg = OmegaConf.create({
        "data": {"max_response_length": 2048, "mm_processor_kwargs": {"min_pixels": 3136, "max_pixels": 401408}},
        "reward": {"reward_manager": {"name": "dapo"}, "reward_kwargs": {
            "max_resp_len": 2048, "overlong_buffer_cfg": {"enable": True, "len": 384, "penalty_factor": 1.0}}},
        "actor_rollout_ref": {"rollout": {"engine_kwargs": {"vllm": {"mm_processor_cache_gb": 4}}}},
    })
    for key, value in changes.items():
        if value is None:  # None deletes the key
            parent, _, leaf = key.rpartition(".")
            OmegaConf.select(cfg, parent).pop(leaf)
        else:
            OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    return cfg


@pytest.mark.parametrize("changes, expected", [
    ({}, None),
    ({"reward.reward_manager.name": "naive"}, "set reward.reward_manager.name=dapo"),
    ({"reward.reward_manager.name": "naive", "reward.reward_kwargs.overlong_buffer_cfg.enable": False}, None),
    ({"reward.reward_kwargs.max_resp_len": 1024}, "write max_resp_len: ${data.max_response_length}"),
    ({"reward.reward_kwargs.overlong_buffer_cfg.len": 2048}, "'reward.reward_kwargs.overlong_buffer_cfg.len' = 2048"),
    ({"reward.reward_kwargs.overlong_buffer_cfg.len": 0}, "'reward.reward_kwargs.overlong_buffer_cfg.len' = 0"),
    ({"data.mm_processor_kwargs.min_pixels": None}, "'data.mm_processor_kwargs.max_pixels' is set without"),
    ({"data.mm_processor_kwargs.max_pixels": None}, "'data.mm_processor_kwargs.min_pixels' is set without"),
    ({"data.mm_processor_kwargs": {}}, None),
    ({"actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache": True}, "mm_processor_cache_gb: 0"),
    # SGLang applies its server's budget, not the request's
    ({"actor_rollout_ref.rollout.name": "sglang"}, "write image: ${data.mm_processor_kwargs}"),
    ({"actor_rollout_ref.rollout.name": "sglang", SGLANG_IMAGE: {"min_pixels": 3136, "max_pixels": 1003520}},
     "'actor_rollout_ref.rollout.engine_kwargs.sglang.mm_process_config.image' = {'min_pixels': 3136, 'max_pixels'"),
    ({"actor_rollout_ref.rollout.name": "sglang", SGLANG_IMAGE: {"min_pixels": 3136, "max_pixels": 401408}}, None),
    ({"actor_rollout_ref.rollout.name": "sglang", "data.mm_processor_kwargs": {}}, None),
])
def test_open_dict_rules_name_the_broken_key(changes, expected):
    errors = open_dict_errors(_rules_cfg(**changes))
    if expected is None:
        assert errors == []
    else:
        assert len(errors) == 1 and expected in errors[0], errors


# ------------------------------------------------------------------------------------------------ tiny VL models

FAMILIES = ("qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    return {family: MODELS[family](tmp_path_factory.mktemp(family)) for family in FAMILIES}


def _image_processor(folder):
    # transformers' PIL backend: the torchvision one (what AutoProcessor picks on a GPU node) is not installed here
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil.from_pretrained(folder)


def _prompt_inputs(folder, row, mm_processor_kwargs):
    """What Qwen2.5-VL / Qwen3-VL processors do for one row: render the chat, one <|image_pad|> per merged patch."""
    from transformers import AutoTokenizer

    tokenizer, image_processor = AutoTokenizer.from_pretrained(folder), _image_processor(folder)
    image = Image.open(io.BytesIO(row["images"][0]["bytes"]))
    text = row["prompt"][0]["content"].replace("<image>", "")
    messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert "<|vision_start|><|image_pad|><|vision_end|>" in prompt
    pixels = image_processor(images=[image], return_tensors="pt", **mm_processor_kwargs)
    image_tokens = int(pixels["image_grid_thw"].prod()) // image_processor.merge_size**2
    input_ids = tokenizer(prompt.replace("<|image_pad|>", "<|image_pad|>" * image_tokens), return_tensors="pt")
    return tokenizer, input_ids["input_ids"], pixels


@pytest.mark.representative
@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_vl_model_runs_a_forward_pass_with_an_image(tiny_models, family):
    from transformers import AutoConfig, AutoModelForImageTextToText

    folder = tiny_models[family]
    row = tiny_vl.geo3k_rows("train", 1, random.Random(0))[0]
    tokenizer, input_ids, pixels = _prompt_inputs(folder, row, composed(DAPO).data.mm_processor_kwargs)
    config = AutoConfig.from_pretrained(folder)
    assert config.model_type == family and config.vision_config is not None
    assert config.image_token_id == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert config.vision_start_token_id == tokenizer.convert_tokens_to_ids("<|vision_start|>")
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():  # the model raises when image tokens and image features do not match
        logits = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                       mm_token_type_ids=(input_ids == config.image_token_id).long(), **pixels).logits
    assert logits.shape == (1, input_ids.shape[1], config.text_config.vocab_size)
    assert torch.isfinite(logits).all()


def test_the_tiny_vl_moe_routes_as_the_hub_model(tiny_models):
    """vLLM's Qwen3-VL-MoE reads the routing keys from the text config; transformers does not default
    norm_topk_prob there, and the tiny model without it stopped the engine at start-up (2026-11-26)."""
    tiny = json.loads((tiny_models["qwen3_vl_moe"] / "config.json").read_text())["text_config"]
    real = json.loads((REPO / "models/Qwen/Qwen3-VL-30B-A3B-Instruct/config.json").read_text())["text_config"]
    keys = ("norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "model_type")
    assert {k: tiny.get(k) for k in keys} == {k: real[k] for k in keys}


@pytest.mark.parametrize("family, prefixes", [
    ("qwen2_5_vl", {"lm_head", "model.embed_tokens", "model.layers", "model.norm", "visual.blocks", "visual.merger",
                    "visual.patch_embed"}),
    ("qwen3_vl", {"lm_head", "model.language_model", "model.visual"}),
    ("qwen3_vl_moe", {"lm_head", "model.language_model", "model.visual"}),
])
def test_the_tiny_vl_models_use_the_hub_names(tiny_models, family, prefixes):
    """The hub checkpoints' tensor names: transformers 5 renames Qwen2.5-VL's on load and back on save, and the expert
    layout fix must not skip that reversal for the families that need it."""
    from safetensors import safe_open

    with safe_open(str(tiny_models[family] / "model.safetensors"), "pt") as f:
        assert {".".join(name.split(".")[:2]).removesuffix(".weight") for name in f.keys()} == prefixes


def test_the_tiny_vl_moe_stores_its_experts_as_the_hub_does(tiny_models):
    """[experts, in, out] on disk (the hub's Qwen3-VL-30B-A3B), no square expert matrix, and transformers loads
    exactly the weights the builder made: with transformers' own layout on disk, Megatron-Bridge pushed transposed
    experts and vLLM refused them (2 x H200, 2026-11-26)."""
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText

    folder = tiny_models["qwen3_vl_moe"]
    text = json.loads((folder / "config.json").read_text())["text_config"]
    experts, hidden, inner = text["num_local_experts"], text["hidden_size"], text["moe_intermediate_size"]
    assert len({hidden, inner, 2 * inner}) == 3
    disk = load_file(folder / "model.safetensors")
    fused = {k: v for k, v in disk.items() if k.endswith(FUSED_EXPERTS)}
    assert len(fused) == 2 * text["num_hidden_layers"]
    for name, weight in fused.items():
        expected = (experts, hidden, 2 * inner) if name.endswith("gate_up_proj") else (experts, inner, hidden)
        assert tuple(weight.shape) == expected, name
    loaded = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.bfloat16).state_dict()
    for name, weight in fused.items():
        assert torch.equal(loaded[name], weight.transpose(1, 2)), name


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_vl_processor_loads_with_auto_processor(tiny_models, family):
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(tiny_models[family])
    except ImportError as err:
        if "torchvision" not in str(err).lower():
            raise
        pytest.skip("transformers' Qwen-VL processors need torchvision (for their video processor), which this "
                    "machine lacks; the forward-pass test covers tokenizer, template and image processor")
    row = tiny_vl.geo3k_rows("train", 1, random.Random(0))[0]
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "area?"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[prompt], images=[Image.open(io.BytesIO(row["images"][0]["bytes"]))], return_tensors="pt")
    image_tokens = int((inputs["input_ids"] == processor.image_token_id).sum())
    assert image_tokens == int(inputs["image_grid_thw"].prod()) // 4


def test_tiny_rows_fit_the_tiny_smoke_prompt_length(tiny_models):
    cfg = composed(DAPO, "+configs/smoke=tiny_gpu")
    rows = tiny_vl.geo3k_rows("train", 16, random.Random(1))
    assert [row["data_source"] for row in rows] == ["hiyouga/geometry3k"] * 16
    for row in rows:
        assert row["prompt"][0]["content"].count("<image>") == len(row["images"]) == 1
        _, input_ids, _ = _prompt_inputs(tiny_models["qwen2_5_vl"], row, cfg.data.mm_processor_kwargs)
        assert input_ids.shape[1] <= cfg.data.max_prompt_length


def test_pixel_budget_caps_image_tokens_only_as_a_pair(tiny_models):
    """The fragment's budget bounds a large diagram to 512 Qwen2.5-VL tokens; a lone max_pixels does nothing in
    transformers (while vLLM would apply it), which is why verl_recipes.check.passthrough wants both bounds."""
    budget = dict(composed(DAPO).data.mm_processor_kwargs)
    image_processor = _image_processor(tiny_models["qwen2_5_vl"])
    large = Image.new("RGB", (1200, 900), "white")

    def tokens(**kwargs):
        grid = image_processor(images=[large], return_tensors="pt", **kwargs)["image_grid_thw"]
        return int(grid.prod()) // image_processor.merge_size**2

    assert tokens(**budget) <= 512
    assert tokens(max_pixels=budget["max_pixels"]) == tokens() > 512


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen25-vl-7b-geo3k-dapo", "qwen3-vl-8b-geo3k-dapo", "deepeyes-qwen25-vl-7b"])
def test_fused_kernels_are_refused_for_vl_models_on_fsdp2(name):
    """verl 0.9.1 crashes in compute_log_prob with them (found by the deepeyes tiny smoke on an H200)."""
    from verl_recipes.check.recipe import check

    errors = check(catalog.get(name), ["actor_rollout_ref.model.use_fused_kernels=true"])
    assert any("use_fused_kernels' = true fails on FSDP2" in e and "vision tower" in e for e in errors), errors

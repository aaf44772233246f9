"""Qwen3 MoE recipes on Megatron: the 235B node-count presets, the 30B-A3B single-node stand-in, and the
Qwen3-VL-30B-A3B geometry3k recipe's TP x EP presets.

Each preset is composed against the installed verl 0.9.1 and planned on 80 GB GPUs; the README's presets table
must hold the planner's numbers.
"""

from __future__ import annotations

import json
import re
from functools import cache

import pytest
from composed import composed
from omegaconf import OmegaConf

from verl_recipes import catalog
from verl_recipes.catalog import REPO
from verl_recipes.check.keys import unknown_and_ignored_keys
from verl_recipes.compose import compose, compose_verl_base, flatten, own_files
from verl_recipes.planner import hf_total_params, model_shape, plan

BIG = "qwen3-235b-a22b-grpo"
STANDIN = "qwen3-30b-a3b-grpo"
BIG_CONFIG = REPO / "models/Qwen/Qwen3-235B-A22B/config.json"
STANDIN_CONFIG = REPO / "models/Qwen/Qwen3-30B-A3B/config.json"
VL = "qwen3-vl-30b-a3b-geo3k-dapo"
VL_CONFIG = REPO / "models/Qwen/Qwen3-VL-30B-A3B-Instruct/config.json"
MEGATRON = "actor_rollout_ref.actor.megatron"
OPTIM = "actor_rollout_ref.actor.optim"

# preset: nodes, TP, PP, VPP, CP, EP, ETP, share of the optimizer on the CPU
PRESETS = {
    "n4": (4, 4, 8, None, 1, 4, 1, 1.0),
    "n8": (8, 4, 8, None, 1, 8, 1, 0.5),
    "n16": (16, 4, 8, None, 1, 8, 1, 0.0),
    "n32": (32, 2, 8, 2, 1, 32, 1, 0.0),
}
# VL preset (None: recipe.yaml, the talk's fastest): TP, EP; PP 1, CP 1, ETP 1 and 8 GPUs in all
VL_PRESETS = {None: (1, 8), "tp1_ep4": (1, 4), "tp2_ep4": (2, 4), "tp2_ep8": (2, 8), "tp4_ep4": (4, 4), "tp4_ep8": (4, 8)}
MOE_OVERRIDES = {
    "moe_grouped_gemm": True,
    "moe_permute_fusion": True,
    "moe_token_dispatcher_type": "alltoall",
    "moe_router_dtype": "fp32",
    "recompute_granularity": "full",
    "recompute_method": "uniform",
    "recompute_num_layers": 1,
}




@cache
def verl_megatron_schema():
    return compose_verl_base("ppo_trainer", "megatron")


def parallel_sizes(cfg) -> tuple:
    m = OmegaConf.select(cfg, MEGATRON)
    return (m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.virtual_pipeline_model_parallel_size,
            m.context_parallel_size, m.expert_model_parallel_size, m.expert_tensor_parallel_size)


def cpu_optimizer_fraction(cfg) -> float:
    override = OmegaConf.select(cfg, f"{OPTIM}.override_optimizer_config") or {}
    return float(override.get("optimizer_offload_fraction", 0.0)) if override.get("optimizer_cpu_offload") else 0.0


def all_moe_configs():
    return [(BIG, v) for v in (None, *PRESETS)] + [(STANDIN, None), (VL, None)]


@pytest.mark.slow
@pytest.mark.parametrize("variant", PRESETS)
def test_preset_composes_with_its_layout(variant):
    nodes, tp, pp, vpp, cp, ep, etp, cpu_share = PRESETS[variant]
    cfg = composed(BIG, variant)
    assert cfg.model_engine == "megatron" and cfg.actor_rollout_ref.actor.strategy == "megatron"
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (nodes, 8)
    assert parallel_sizes(cfg) == (tp, pp, vpp, cp, ep, etp)
    ref = cfg.actor_rollout_ref.ref.megatron
    assert (ref.tensor_model_parallel_size, ref.pipeline_model_parallel_size, ref.expert_model_parallel_size,
            ref.expert_tensor_parallel_size) == (tp, pp, ep, etp)
    assert cpu_optimizer_fraction(cfg) == cpu_share
    if cpu_share:  # Megatron's CPU optimizer requires the precision-aware optimizer
        assert OmegaConf.select(cfg, f"{OPTIM}.use_precision_aware_optimizer") is True
    megatron = OmegaConf.select(cfg, MEGATRON)
    assert megatron.param_offload and megatron.optimizer_offload  # state leaves the GPU while vLLM generates
    assert megatron.use_mbridge is True and megatron.vanilla_mbridge is False  # Megatron-Bridge, no conversion


@pytest.mark.slow
@pytest.mark.parametrize("name, variant", all_moe_configs())
def test_total_gpus_tile_the_megatron_and_rollout_layouts(name, variant):
    cfg = composed(name, variant)
    gpus = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    tp, pp, _, cp, ep, etp = parallel_sizes(cfg)
    assert cfg.trainer.n_gpus_per_node == 8
    assert gpus % (tp * pp * cp) == 0 and gpus % (etp * ep * pp) == 0
    rollout = cfg.actor_rollout_ref.rollout
    replica = rollout.tensor_model_parallel_size * rollout.data_parallel_size
    assert rollout.expert_parallel_size == replica  # verl: rollout EP = TP x DP
    assert gpus % replica == 0


@pytest.mark.representative
@pytest.mark.parametrize("name, variant", all_moe_configs())
def test_moe_overrides_reach_actor_and_reference(name, variant):
    cfg = composed(name, variant)
    for role in ("actor", "ref"):
        override = cfg.actor_rollout_ref[role].megatron.override_transformer_config
        assert {key: override[key] for key in MOE_OVERRIDES} == MOE_OVERRIDES, role


@pytest.mark.slow
@pytest.mark.parametrize("name, variant", all_moe_configs())
def test_no_removed_unknown_or_ignored_keys(name, variant):
    recipe = catalog.get(name, variant=variant)
    raw = compose(recipe, [], naming=False, resolve=False)
    assert not [key for key in flatten(raw) if "grad_offload" in key]  # removed in 0.9.1
    assert unknown_and_ignored_keys(raw, verl_megatron_schema(), own_files(recipe.config_name), []) == []


def planned_peaks(result) -> tuple[float, float]:
    """(actor update, rollout phase) GiB per GPU, as the planner prints them."""
    training = sum(term.gib for term in result.training_terms)
    rollout = next(float(m[1]) for line in result.lines if (m := re.match(r"rollout phase: .* = ([\d.]+) GiB", line)))
    return training, rollout


def readme_rows(name: str) -> dict[str, dict[str, str]]:
    """The presets table of a recipe README: first cell -> {column header: cell}."""
    lines = [line for line in (REPO / "recipes" / name / "README.md").read_text().splitlines() if line.startswith("|")]
    header = next(line for line in lines if "actor update GiB" in line)
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = {}
    for line in lines[lines.index(header) + 2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != len(columns):
            break
        rows[cells[0].split()[0]] = dict(zip(columns, cells))
    return rows


@pytest.mark.representative
@pytest.mark.parametrize("variant", PRESETS)
def test_preset_fits_80gb_and_the_readme_holds_the_planner_numbers(variant):
    result = plan(composed(BIG, variant), BIG_CONFIG, gpu_memory_gib=80)
    assert result.errors == [] and result.fits, result.verdict
    training, rollout = planned_peaks(result)
    row = readme_rows(BIG)[variant]
    assert (row["actor update GiB"], row["rollout GiB"]) == (f"{training:.2f}", f"{rollout:.2f}")
    nodes, tp, pp, vpp, cp, ep, etp, _ = PRESETS[variant]
    assert row["nodes x GPUs"] == f"{nodes} x 8 = {nodes * 8}"
    assert [row[c] for c in ("TP", "PP", "VPP", "CP", "EP", "ETP")] == [str(v) for v in (tp, pp, vpp or 1, cp, ep, etp)]
    assert row["planner verdict"] == "fits"


@pytest.mark.slow
def test_standin_fits_one_node_and_its_readme_holds_the_planner_numbers():
    result = plan(composed(STANDIN), STANDIN_CONFIG, gpu_memory_gib=80)
    assert result.errors == [] and result.fits, result.verdict
    training, rollout = planned_peaks(result)
    row = readme_rows(STANDIN)["1"]
    assert (row["actor update GiB"], row["rollout GiB"]) == (f"{training:.2f}", f"{rollout:.2f}")


def test_vl_presets_are_the_talks_whole_grid():
    assert set(VL_PRESETS.values()) == {(tp, ep) for tp in (1, 2, 4) for ep in (4, 8)}
    assert set(catalog.variants(VL, "v1")) == set(VL_PRESETS) - {None} == set(catalog.load_card(VL, "v1")["variants"])


@pytest.mark.slow
@pytest.mark.parametrize("variant", VL_PRESETS)
def test_vl_preset_fits_80gb_and_the_readme_holds_the_planner_numbers(variant):
    tp, ep = VL_PRESETS[variant]
    cfg = composed(VL, variant)
    assert parallel_sizes(cfg) == (tp, 1, None, 1, ep, 1)
    result = plan(cfg, VL_CONFIG, gpu_memory_gib=80)
    assert result.errors == [] and result.fits, result.verdict
    training, rollout = planned_peaks(result)
    row = readme_rows(VL)[variant or "recipe.yaml"]
    assert (row["actor update GiB"], row["rollout GiB"]) == (f"{training:.2f}", f"{rollout:.2f}")
    assert [row[c] for c in ("TP", "PP", "CP", "EP", "ETP", "DP")] == [str(v) for v in (tp, 1, 1, ep, 1, 8 // tp)]
    assert row["planner verdict"] == "fits"


def test_recipe_yaml_is_the_n8_preset():
    assert flatten(composed(BIG)) == flatten(composed(BIG, "n8"))


def test_standin_is_the_235b_recipe_on_one_node():
    """Only the model, the layout and the rollout split differ from the 8-node preset."""
    big, small = flatten(composed(BIG, "n8")), flatten(composed(STANDIN))
    differing = {key for key in big.keys() | small.keys() if big.get(key, "<absent>") != small.get(key, "<absent>")}
    allowed = re.compile(
        r"actor_rollout_ref\.model\.path|actor_rollout_ref\.rollout\.prometheus\.served_model_name"
        r"|trainer\.nnodes"
        r"|actor_rollout_ref\.rollout\.(tensor_model_parallel_size|data_parallel_size|expert_parallel_size)"
        r"|actor_rollout_ref\.(actor|ref)\.megatron\.(tensor|pipeline|virtual_pipeline|expert)_model_parallel_size"
        r"|actor_rollout_ref\.(actor|ref)\.megatron\.override_transformer_config"
        r"\.num_layers_in_(first|last)_pipeline_stage"
    )
    assert differing and all(allowed.fullmatch(key) for key in differing), sorted(differing)
    assert parallel_sizes(composed(STANDIN)) == (2, 2, 2, 1, 4, 1)
    assert composed(STANDIN).trainer.nnodes == 1


def test_cards_name_their_smoke_model_and_tiny_family():
    """The 235B has no tiny path of its own: the 30B stand-in's tiny MoE takes the same Megatron paths."""
    for name, smoke, family in ((BIG, "Qwen/Qwen3-235B-A22B", None), (STANDIN, "Qwen/Qwen3-30B-A3B", "qwen3_moe"),
                                (VL, "Qwen/Qwen3-VL-30B-A3B-Instruct", "qwen3_vl_moe")):
        card = catalog.load_card(name, "v1")
        assert card["smoke_model"] == smoke and card.get("tiny_family") == family
        assert (REPO / "models" / smoke / "config.json").is_file()
    assert set(catalog.load_card(BIG, "v1")["variants"]) == set(PRESETS)


@pytest.mark.slow
def test_standin_node_smoke_keeps_a_valid_layout():
    cfg = composed(STANDIN, None, ("+configs/smoke=node", "actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B"))
    result = plan(cfg, STANDIN_CONFIG, gpu_memory_gib=80)
    assert result.errors == [] and result.fits, result.verdict


def test_unset_expert_tensor_parallel_breaks_the_layout():
    """Why every layout writes ETP 1: unset, ETP follows TP and ETP x EP x PP outgrows the GPUs."""
    cfg = composed(BIG, "n8", (f"{MEGATRON}.expert_tensor_parallel_size=null",))
    errors = plan(cfg, BIG_CONFIG, gpu_memory_gib=80).errors
    assert any("[ETP×EP×PP divides the world size] 4×8×8 = 256" in error for error in errors), errors


def test_removed_grad_offload_is_refused_with_its_replacement():
    from verl_recipes.catalog import RecipeError

    with pytest.raises(RecipeError, match="removed in 0.9.1; use megatron.optimizer_offload"):
        compose(catalog.get(BIG), [f"{MEGATRON}.grad_offload=true"], naming=False)


@pytest.mark.parametrize("config, fields, total_params", [
    (BIG_CONFIG, dict(hidden_size=4096, num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4,
                      head_dim=128, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=1536,
                      intermediate_size=12288, vocab_size=151936, max_position_embeddings=40960,
                      tie_word_embeddings=False), 235.09e9),
    (STANDIN_CONFIG, dict(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4,
                          head_dim=128, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                          intermediate_size=6144, vocab_size=151936, max_position_embeddings=40960,
                          tie_word_embeddings=False), 30.53e9),
], ids=["235b-a22b", "30b-a3b"])
def test_model_configs_hold_the_public_shapes(config, fields, total_params):
    hf = json.loads(config.read_text())
    assert {key: hf[key] for key in fields} == fields
    assert hf["model_type"] == "qwen3_moe" and hf["mlp_only_layers"] == [] and hf["decoder_sparse_step"] == 1
    assert hf_total_params(model_shape(hf)) == pytest.approx(total_params, rel=1e-3)  # the names' 235B and 30B


# ------------------------------------------------------------------------------------------------ tiny MoE smokes


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory):
    from verl_recipes.smoke.tiny import MODELS

    return MODELS["qwen3_moe"](tmp_path_factory.mktemp("qwen3_moe"))


def test_the_tiny_qwen3_moe_has_the_30b_architecture_and_routes_every_layer(tiny_moe):
    import torch
    from transformers import AutoModelForCausalLM

    tiny, real = (json.loads(path.read_text()) for path in (tiny_moe / "config.json", STANDIN_CONFIG))
    shape = ("model_type", "architectures", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
             "tie_word_embeddings")
    assert {k: tiny[k] for k in shape} == {k: real[k] for k in shape}
    model = AutoModelForCausalLM.from_pretrained(tiny_moe, dtype=torch.float32, output_router_logits=True)
    out = model(input_ids=torch.arange(12).view(1, 12))
    assert torch.isfinite(out.logits).all()
    assert len(out.router_logits) == tiny["num_hidden_layers"]  # every layer routes
    assert out.router_logits[0].shape[-1] == model.config.num_experts == 8  # transformers 5: num_local_experts


@pytest.mark.slow
@pytest.mark.parametrize("name", [STANDIN, VL])
def test_the_tiny_layouts_split_the_tiny_models(name):
    """EP divides the experts, TP the heads and KV heads, PP the layers, and the GPUs hold the trainer: the tiny
    smokes' layouts (configs/smoke/tiny_*megatron*) against the tiny Qwen3-MoE (random_models.TINY)."""
    from verl_recipes.random_models import TINY
    from verl_recipes.smoke.run import overlay_args, tiny_overlays

    tiny = TINY["qwen3_moe"]

    recipe = catalog.get(name)
    layouts = tiny_overlays(recipe)
    assert layouts == ["tiny_gpu_megatron", "tiny_2gpu_megatron_tp2_ep2"]
    for layout in layouts:
        cfg = compose(recipe, overlay_args(recipe, True, recipe.card_value("smoke_model"), layout))
        m = cfg.actor_rollout_ref.actor.megatron
        tp, pp, ep, etp = (m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.expert_model_parallel_size,
                           m.expert_tensor_parallel_size)
        gpus = cfg.trainer.n_gpus_per_node
        assert tiny["num_experts"] % ep == 0 and tiny["num_key_value_heads"] % tp == 0
        assert tiny["num_hidden_layers"] % (pp * (m.virtual_pipeline_model_parallel_size or 1)) == 0
        assert gpus % (tp * pp) == 0 and (gpus // pp) % (ep * etp) == 0  # experts fold over TP x DP
    assert (tp, ep, gpus) == (2, 2, 2)  # the two-GPU layout exercises TP and EP
    with pytest.raises(catalog.RecipeError, match="tiny overlays are tiny_gpu_megatron, tiny_2gpu_megatron_tp2_ep2"):
        overlay_args(recipe, True, "model", "tiny_gpu")  # a layout the card does not list


def test_the_tiny_dapo_prompts_fit_the_tiny_smoke(tiny_moe):
    """The MoE recipes train on dapo_math: the tiny rows carry the DAPO template and fit the tiny prompt budget
    (rows over it would be filtered out, leaving nothing to train on)."""
    import random

    from transformers import AutoTokenizer

    from verl_recipes.data.prompts import DAPO_PREFIX
    from verl_recipes.smoke.run import smoke_args
    from verl_recipes.smoke.tiny import ROWS

    tok = AutoTokenizer.from_pretrained(tiny_moe)
    limit = compose(catalog.get(STANDIN), smoke_args(catalog.get(STANDIN), tiny_moe.parent)).data.max_prompt_length
    rows = ROWS["dapo_math"]("train", 16, random.Random(0))
    assert all(row["prompt"][0]["content"].startswith(DAPO_PREFIX) for row in rows)
    lengths = [len(tok(tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False))["input_ids"])
               for row in rows]
    assert max(lengths) <= limit == 128


# ------------------------------------------------------------------------------------------------ Megatron's scheduler


@pytest.mark.representative
@pytest.mark.parametrize("steps, warmup, refused", [(5, 10, True), (10, 10, True), (11, 10, False), (3, 0, False)])
def test_megatron_warm_up_must_end_before_the_last_step(steps, warmup, refused):
    """Megatron asserts lr_warmup_steps < lr_decay_steps (= total_training_steps) at start-up; the tiny VL-MoE smoke
    (DAPO's 10 warm-up steps, 2 steps) stopped there on the GPU. FSDP runs the same settings, so only Megatron is
    refused."""
    from verl_recipes.check.startup import megatron_scheduler_errors

    args = (f"trainer.total_training_steps={steps}", f"actor_rollout_ref.actor.optim.lr_warmup_steps={warmup}")
    errors = megatron_scheduler_errors(composed(VL, None, args))
    assert bool(errors) == refused, errors
    if refused:
        assert "actor_rollout_ref.actor.optim.lr_warmup_steps" in errors[0] and f"= {warmup} " in errors[0]
    assert megatron_scheduler_errors(composed("qwen25-vl-7b-geo3k-dapo", None, args)) == []


@pytest.mark.slow
def test_megatron_warm_up_ratio_and_decay_steps_count():
    from verl_recipes.check.startup import megatron_scheduler_errors

    ratio = ("trainer.total_training_steps=4", "actor_rollout_ref.actor.optim.lr_warmup_steps=-1",
             "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=1.0")
    assert megatron_scheduler_errors(composed(VL, None, ratio))  # verl derives 4 warm-up steps of 4
    decay = ("trainer.total_training_steps=4", "actor_rollout_ref.actor.optim.lr_decay_steps=100")
    assert megatron_scheduler_errors(composed(VL, None, decay)) == []  # decays over 100 steps, not 4


@pytest.mark.slow
@pytest.mark.parametrize("name, variant", [(STANDIN, None), (VL, None), ("qwen25-7b-grpo", "megatron")])
def test_the_smoke_overlays_pass_megatron_scheduler(name, variant):
    """The node smoke runs 3 steps and the tiny one 2: their overlay turns the warm-up off."""
    from verl_recipes.check.startup import megatron_scheduler_errors
    from verl_recipes.smoke.run import overlay_args

    recipe = catalog.parse(f"{name}:{variant}" if variant else name)
    for tiny in (False, True):
        cfg = compose(recipe, overlay_args(recipe, tiny, "model", None))
        assert megatron_scheduler_errors(cfg) == []

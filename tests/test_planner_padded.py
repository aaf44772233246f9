"""Padded rows (model.use_remove_padding=False, the sdpa_padded fallback of a vision-language model without
flash-attn), planned against the node run that measured them: qwen25-vl-7b-geo3k-dapo at 20 layers on 2 x H200
(results/node/qwen25-vl-7b-geo3k-dapo.2xh200.json, 2026-11-28 18:29). Its update peaked at 71.01 GiB; its second
old-log-prob pass ran out of memory asking 36.54 GiB more at 124.87 GiB allocated, under verl's eager entropy."""

import json
import tempfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_recipes import catalog
from verl_recipes.compose import compose
from verl_recipes.config_copy import copy_config
from verl_recipes.node.config import compose_node
from verl_recipes.node.run import shape_folder
from verl_recipes.planner import plan
from verl_recipes.planner.plan import ROLLOUT, micro_batch

RECORD = json.loads((catalog.root() / "results/node/qwen25-vl-7b-geo3k-dapo.2xh200.json").read_text())
HOOK = "ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES"
GPU_GIB = RECORD["machine"]["gpu_memory_gib"]
OOM_GIB = 124.87 + 36.54  # allocated when the pass asked for one more fp32 [rows, positions, vocab] temporary


@pytest.fixture(scope="module")
def launched():
    """The config the run launched: the node's, and the fallback the launcher added on a machine without flash-attn;
    the model folder at the run's depth."""
    recipe = catalog.get("qwen25-vl-7b-geo3k-dapo")
    node = compose_node(recipe, RECORD["gpus"], " ".join(RECORD["args"]))
    assert node.layers == RECORD["layers"] == 20
    with tempfile.TemporaryDirectory() as folder:
        model = shape_folder(node, Path(folder))
        cfg = compose(recipe, [*node.args(model), "+configs/attention=sdpa_padded"])
        yield cfg, model


def test_a_padded_micro_batch_is_its_rows_times_the_longest():
    """21 rows of 3,072 positions: the 36.54 GiB the pass asked for is one float32 copy of their logits."""
    cfg = OmegaConf.create({"actor_rollout_ref": {"model": {"use_remove_padding": False}, "rollout": {
        "log_prob_use_dynamic_bsz": True, "log_prob_max_token_len_per_gpu": 49152}},
        "data": {"max_prompt_length": 1024, "max_response_length": 2048}})
    positions, packed, line = micro_batch(cfg, "log_prob", 3072, 1)
    assert positions == 21 * 3072 and packed == 21 * 2241 and "21 rows" in line
    assert positions * 152064 * 4 / 2**30 == pytest.approx(36.54, abs=0.01)
    OmegaConf.update(cfg, "actor_rollout_ref.model.use_remove_padding", True)
    assert micro_batch(cfg, "log_prob", 3072, 1) == (49152, 0, "")


def test_the_padded_update_is_planned_within_the_node_gate(launched):
    cfg, model = launched
    planned = plan(cfg, model, GPU_GIB)
    update = sum(term.gib for term in planned.training_terms) - 4.0  # less the CUDA context and what vLLM keeps
    measured = RECORD["memory_phases"]["update_actor"]["peak_gib"]
    assert measured == pytest.approx(71.01, abs=0.01)
    assert update == pytest.approx(measured, rel=0.05)
    assert planned.fits and any("padded rows" in line for line in planned.lines)


def test_verls_eager_entropy_over_padded_rows_is_the_oom(launched):
    """Without our chunked entropy the plan's old-log-prob pass holds what the run asked for, and does not fit."""
    cfg, model = launched
    cfg = copy_config(cfg)
    OmegaConf.update(cfg, HOOK, "")
    planned = plan(cfg, model, GPU_GIB)
    assert not planned.fits and "old log-prob pass" in planned.verdict and "sdpa_padded" in planned.verdict
    assert OOM_GIB <= planned.phases_gib["old log-probs"] - 4.0 <= OOM_GIB * 1.1


def test_chunked_entropy_brings_the_pass_back_under_the_update(launched):
    cfg, model = launched
    planned = plan(cfg, model, GPU_GIB)
    assert planned.phases_gib["old log-probs"] < planned.phases_gib["actor update"] < GPU_GIB / 1.5
    assert OmegaConf.select(cfg, f"{ROLLOUT}.log_prob_max_token_len_per_gpu") == 49152  # the recipe's own budget

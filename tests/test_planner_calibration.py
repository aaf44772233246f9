"""The FSDP estimates (update and old-log-prob pass) against peaks measured through verl's FSDP2 engine on one H200
(committed JSON)."""

import json
from pathlib import Path

import pytest

from verl_recipes.planner import fsdp_breakdown, model_shape
from verl_recipes.planner.fsdp_memory import CUDA_CONTEXT_NCCL_GIB, fsdp_log_prob_pass

RESULTS = Path(__file__).resolve().parent.parent / "results/planner"
MEASURED = json.loads((RESULTS / "fsdp-calibration.qwen2.5-1.5b-h200.json").read_text())
LOG_PROB_RUNS = json.loads((RESULTS / "log-prob-calibration.h200.json").read_text())["runs"]
LOG_PROB_ROWS = [(run["hf_config"], {**row, "eager": run["eager"]}) for run in LOG_PROB_RUNS for row in run["rows"]]


@pytest.mark.parametrize("arm", MEASURED["arms"], ids=lambda a: f"fused={a['use_fused_kernels']}-{a['tokens']}")
def test_fsdp_estimate_tracks_the_measured_peak(arm):
    parts = fsdp_breakdown(model_shape(MEASURED["hf_config"]), 1, arm["tokens"], True, arm["use_fused_kernels"])
    estimate = parts.total_gib - CUDA_CONTEXT_NCCL_GIB  # max_memory_allocated does not see the CUDA context
    error = (estimate - arm["peak_gib"]) / arm["peak_gib"]
    # fused kernels (every recipe's path): within 2%; the unfused no-flash-attn logits path: within 11%
    assert abs(error) < (0.02 if arm["use_fused_kernels"] else 0.11), f"{error:+.1%}"


@pytest.mark.parametrize("hf_config,row", LOG_PROB_ROWS,
                         ids=lambda x: x.get("model_type", "") if "tokens" not in x else f"{x['chunking']}-{x['tokens']}")
def test_old_log_prob_pass_tracks_the_measured_peak(hf_config, row):
    """Above the state: the larger of the layers' and the logits' moments (verl's compiled entropy counts nothing)."""
    chunk = 2048 if row["chunking"] else None
    lp = fsdp_log_prob_pass(model_shape(hf_config), 1, row["tokens"], entropy_chunk_size=chunk,
                            torch_compile=not row["eager"])
    estimate = max(lp.layer_moment_gib, lp.logits_moment_gib)
    error = (estimate - row["above_before_gib"]) / row["above_before_gib"]
    # the logits' moment within 3%; it may only over-estimate where the layers' moment wins (7B, 8k tokens: +11%)
    # and where the eager chunked entropy is counted from verl's code (12 B per token per vocab entry, measured ~10.3)
    exact = lp.logits_moment_gib >= lp.layer_moment_gib and not (row["eager"] and row["chunking"])
    assert -0.03 < error < (0.03 if exact else 0.12), f"{error:+.1%}"


MEGATRON = RESULTS / "megatron-calibration"
MEGATRON_RUNS = json.loads((MEGATRON / "runs.json").read_text())["runs"]


@pytest.mark.parametrize("run", MEGATRON_RUNS, ids=lambda r: r["name"])
def test_megatron_plan_tracks_the_measured_allocator_peak(run):
    """The planner's allocator peak for the run's own composed config against verl's max_memory_allocated over its
    steps: tiny models peak at the weight push (verl's 2 GiB bucket), Qwen2.5-1.5B in the update. All four land
    4-9% under the measurement; without the push phase the tiny ones were 97% under."""
    from omegaconf import OmegaConf

    from verl_recipes.planner import plan

    result = plan(OmegaConf.load(MEGATRON / run["config"]), run["hf_config"], gpu_memory_gib=80)
    measured = max(run["measured_gib"].values())
    error = (result.allocated_gib - measured) / measured
    assert abs(error) < 0.10, f"{error:+.1%}"


def test_the_push_bucket_is_what_a_tiny_run_peaks_at():
    """Lowering verl's bucket lowers the tiny plan's allocator peak by as much: the push phase is what is counted."""
    from omegaconf import OmegaConf

    from verl_recipes.planner import plan

    run = next(r for r in MEGATRON_RUNS if r["name"] == "tiny-qwen2-tp1")
    cfg = OmegaConf.load(MEGATRON / run["config"])
    full = plan(cfg, run["hf_config"]).allocated_gib
    cfg.actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes = 512
    assert full - plan(cfg, run["hf_config"]).allocated_gib == pytest.approx(1.5, abs=0.01)


def test_fsdp_tiny_plan_tracks_the_measured_allocator_peak(tmp_path):
    """The FSDP tiny smoke (results/smoke/qwen25-7b-grpo-v1.tiny-h200.json, 1 x H200) peaks at the weight push too:
    2.09 GiB measured, the plan of its composed smoke config within 5%."""
    from verl_recipes import catalog
    from verl_recipes.check import gates
    from verl_recipes.compose import compose
    from verl_recipes.planner import plan
    from verl_recipes.smoke.run import overlay_args
    from verl_recipes.smoke.tiny import MODELS

    steps = gates.read_metrics(RESULTS.parent / "smoke/qwen25-7b-grpo-v1.tiny-h200.metrics.jsonl")
    measured = max(step["actor/perf/max_memory_allocated_gb"] for step in steps.values()
                   if "actor/perf/max_memory_allocated_gb" in step)
    model = MODELS["qwen2"](tmp_path / "model")
    recipe = catalog.parse("qwen25-7b-grpo")
    result = plan(compose(recipe, overlay_args(recipe, True, str(model))), model / "config.json")
    assert abs(result.allocated_gib - measured) / measured < 0.05, (result.allocated_gib, measured)

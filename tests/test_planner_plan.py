"""plan() and the CLI on configs composed by Hydra from verl 0.9.1's own ppo_trainer.yaml."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from test_planner_hf_configs import QWEN2_5_7B, QWEN3_235B_A22B

from verl_recipes.planner import plan

VERL_CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer/config")
REPO_ROOT = Path(__file__).resolve().parents[1]
ACTOR = "actor_rollout_ref.actor"
MEGATRON = f"{ACTOR}.megatron"
ROLLOUT = "actor_rollout_ref.rollout"

# verl's 0.9.1 GRPO template shape (examples/grpo_trainer/run_qwen3_8b_fsdp.sh) on Qwen2.5-7B
FSDP_RECIPE = [
    f"{ACTOR}.use_dynamic_bsz=True",
    f"{ACTOR}.ppo_max_token_len_per_gpu=24576",
    "data.max_prompt_length=1024",
    "data.max_response_length=2048",
    f"{ROLLOUT}.tensor_model_parallel_size=2",
    f"{ROLLOUT}.gpu_memory_utilization=0.6",
]
# the Megatron case of NVIDIA's RL pipeline tuning talk: TP2, mbs 2, prompt 2k + response 8k
SEED_MEGATRON = [
    "model_engine=megatron",
    f"{MEGATRON}.tensor_model_parallel_size=2",
    f"{ACTOR}.ppo_micro_batch_size_per_gpu=2",
    "data.max_prompt_length=2048",
    "data.max_response_length=8192",
    f"{ROLLOUT}.gpu_memory_utilization=0.6",
]


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        cfg = compose("ppo_trainer", overrides)
    OmegaConf.resolve(cfg)
    return cfg


def test_seed_megatron_case_shows_the_estimator_numbers_and_does_not_fit():
    result = plan(composed(SEED_MEGATRON), QWEN2_5_7B)
    assert not result.fits and result.errors == []
    assert "  PP rank 0: 3.81 B params, weights+grads+optimizer 31.92 GiB + activations 51.36 GiB = 83.27 GiB" in (
        result.lines
    )
    assert "largest term: activations (51.36 GiB)" in result.verdict
    assert f"{ACTOR}.ppo_max_token_len_per_gpu" in result.verdict
    # 31.92 GiB of actor state stays next to vLLM's 48 GiB share during rollout
    assert f"set {MEGATRON}.{{param_offload,optimizer_offload}}=True" in result.verdict


def test_seed_megatron_case_fits_with_dynamic_batching_and_offload():
    overrides = SEED_MEGATRON + [
        f"{ACTOR}.use_dynamic_bsz=True",
        f"{ACTOR}.ppo_max_token_len_per_gpu=10240",
        f"{MEGATRON}.param_offload=True",
        f"{MEGATRON}.optimizer_offload=True",
    ]
    result = plan(composed(overrides), QWEN2_5_7B)
    assert "  PP rank 0: 3.81 B params, weights+grads+optimizer 31.92 GiB + activations 25.68 GiB = 57.59 GiB" in (
        result.lines
    )
    assert result.fits, result.verdict
    assert result.verdict.startswith("fits: actor update 61.59 GiB (largest term: weights+grads+optimizer 31.92 GiB)")


def test_fsdp_recipe_fits_and_its_logits_outgrow_the_recomputed_layer_until_fused_kernels():
    """entropy_coeff 0: in-place log-probs, 2 B per token per vocabulary entry, above the recomputed layer's moment."""
    logits = "logits, beyond the recomputed layer"
    result = plan(composed(FSDP_RECIPE), QWEN2_5_7B)
    assert result.fits, result.verdict
    assert {term.name: term.gib for term in result.training_terms}[logits] > 0
    fused = plan(composed(FSDP_RECIPE + ["actor_rollout_ref.model.use_fused_kernels=True"]), QWEN2_5_7B)
    assert {term.name: term.gib for term in fused.training_terms}[logits] == 0
    assert "largest term: layer activations" in fused.verdict
    assert fused.phases_gib["actor update"] < result.phases_gib["actor update"]
    assert fused.rollout.concurrent_sequences > fused.rollout.max_num_seqs  # 3k-token sequences, TP 2


@pytest.mark.parametrize("entropy", [f"{ACTOR}.calculate_entropy=True", f"{ACTOR}.entropy_coeff=0.001"])
def test_an_update_that_computes_the_entropy_keeps_a_second_logits_tensor(entropy):
    """verl's update asks for the entropy when calculate_entropy is set or entropy_coeff is not 0; then its log-probs
    cannot overwrite the logits, and the planner counts 6 B per token per vocabulary entry instead of 2."""
    logits = "logits, beyond the recomputed layer"
    in_place = {t.name: t.gib for t in plan(composed(FSDP_RECIPE), QWEN2_5_7B).training_terms}[logits]
    kept = {t.name: t.gib for t in plan(composed(FSDP_RECIPE + [entropy]), QWEN2_5_7B).training_terms}[logits]
    assert kept > in_place


@pytest.mark.slow
def test_old_log_prob_pass_peaks_at_the_logits_and_counts_the_entropy_only_when_eager():
    """verl 0.9.1 asks the old-log-prob pass for the entropy. Unfused, the pass peaks at the lm_head, the final hidden
    states and the bf16 logits; verl's compiled entropy adds nothing (measured, results/planner/); eager, a softmax."""
    FSDP = f"{ACTOR}.fsdp_config"
    tokens = 8 * 18432  # ReTool's first log-prob budget
    big = FSDP_RECIPE + [f"{ROLLOUT}.log_prob_use_dynamic_bsz=True", f"{ROLLOUT}.log_prob_max_token_len_per_gpu={tokens}"]
    compiled = plan(composed(big), QWEN2_5_7B)
    assert compiled.fits, compiled.verdict
    assert f"  bf16 logits: {tokens * 152064 * 2 / 2**30:.2f} GiB" in compiled.lines
    assert f"  final hidden states: {tokens * 3584 * 2 / 2**30:.2f} GiB" in compiled.lines
    assert f"  gathered bf16 lm_head: {152064 * 3584 * 2 / 2**30:.2f} GiB" in compiled.lines
    assert not any("entropy" in line for line in compiled.lines if line.startswith("  "))
    eager = plan(composed(big + [f"{FSDP}.use_torch_compile=False"]), QWEN2_5_7B)
    assert not eager.fits and "actor update needs" not in eager.verdict and "old log-prob pass needs" in eager.verdict
    assert f"largest term: eager entropy's softmax ({tokens * 152064 * 12 / 2**30:.2f} GiB)" in eager.verdict
    assert f"{FSDP}.use_torch_compile=True" in eager.verdict
    chunked = plan(composed(big + [f"{FSDP}.use_torch_compile=False", f"{ACTOR}.entropy_from_logits_with_chunking=True"]),
                   QWEN2_5_7B)
    assert chunked.fits, chunked.verdict
    assert f"  eager entropy's softmax (chunked): {2048 * 152064 * 12 / 2**30:.2f} GiB" in chunked.lines
    too_big = plan(composed(FSDP_RECIPE + [f"{ROLLOUT}.log_prob_use_dynamic_bsz=True",
                                           f"{ROLLOUT}.log_prob_max_token_len_per_gpu={2 * tokens}"]), QWEN2_5_7B)
    assert not too_big.fits and f"largest term: bf16 logits ({2 * tokens * 152064 * 2 / 2**30:.2f} GiB)" in too_big.verdict
    assert f"lower {ROLLOUT}.log_prob_max_token_len_per_gpu" in too_big.verdict
    fused = plan(composed(big + ["actor_rollout_ref.model.use_fused_kernels=True"]), QWEN2_5_7B)
    assert fused.fits and any(line.startswith("  one layer's MLP intermediates") for line in fused.lines)


def test_fsdp_on_one_gpu_names_the_optimizer_and_offload_policy():
    result = plan(composed(FSDP_RECIPE + ["trainer.n_gpus_per_node=1", f"{ROLLOUT}.tensor_model_parallel_size=1"]),
                  QWEN2_5_7B)
    assert not result.fits
    assert "largest term: AdamW states (56.74 GiB)" in result.verdict
    assert f"{ACTOR}.fsdp_config.offload_policy=True" in result.verdict


def test_rollout_share_too_large_next_to_the_actor():
    result = plan(composed(FSDP_RECIPE + [f"{ROLLOUT}.gpu_memory_utilization=0.9"]), QWEN2_5_7B)
    assert not result.fits
    assert "rollout needs" in result.verdict
    assert f"{ROLLOUT}.gpu_memory_utilization from 0.90 to <= 0.82" in result.verdict  # 0.8295
    assert "actor update needs" not in result.verdict


def test_the_same_share_fits_with_sglang_and_an_unmodelled_engine_is_planned_as_vllm():
    """At 0.9 vLLM's share of the card overfills it beside the actor by 5.64 GiB (85.64, above); SGLang's 0.9 of the
    73.45 GiB free at its start, before AdamW's 7.09 GiB exist, by 1.75 GiB with its graphs, and the limit it
    names is SGLang's (0.87, where vLLM's is 0.82). trtllm, which verl 0.9.1 also runs, is planned as vLLM and says
    so."""
    sglang = plan(composed(FSDP_RECIPE + [f"{ROLLOUT}.gpu_memory_utilization=0.9", f"{ROLLOUT}.name=sglang"]),
                  QWEN2_5_7B)
    assert sglang.rollout.engine == "sglang" and sglang.rollout.pool_gib == pytest.approx(80 - 3.55 - 3.0, abs=0.01)
    assert "SGLang's share: 0.9 of the 73.45 GiB free at its start" in " ".join(sglang.lines)
    assert not sglang.fits and "rollout needs 81.75 GiB" in sglang.verdict
    assert "next to the SGLang share" in sglang.verdict and "from 0.90 to <= 0.87" in sglang.verdict
    trtllm = plan(composed(FSDP_RECIPE + [f"{ROLLOUT}.name=trtllm"]), QWEN2_5_7B)
    assert trtllm.rollout.engine == "vllm" and any(line.startswith("rollout trtllm (planned as vLLM)")
                                                   for line in trtllm.lines)


def test_rollout_advice_never_lowers_a_value_to_itself(capsys):
    """4 GPUs: the limit is 0.6996, which printed as 0.70 told a user at 0.70 to lower it to 0.70."""
    from verl_recipes import cli

    assert cli.main(["plan", "qwen25-7b-grpo", "--args", "trainer.n_gpus_per_node=4"]) == 1
    verdict = capsys.readouterr().out.splitlines()[-1]
    assert "rollout needs" in verdict and "=True" in verdict
    assert "to <= 0.70" not in verdict and "from 0.70 to <= 0.69" in verdict


def test_layout_errors_stop_the_plan():
    result = plan(composed(SEED_MEGATRON + [f"{MEGATRON}.tensor_model_parallel_size=3"]), QWEN2_5_7B)
    assert not result.fits
    assert any("[TP×PP×CP divides the world size]" in error for error in result.errors)
    assert result.verdict.startswith("does not fit: 4 layout rule(s) broken")


def qwen3_235b_demo(extra: list[str]) -> list[str]:
    """verl's examples/grpo_trainer/run_qwen3_235b_a22b_megatron.sh settings on 8 nodes (without grad_offload)."""
    override = f"{MEGATRON}.override_transformer_config"
    return [
        "model_engine=megatron",
        "trainer.nnodes=8",
        f"{MEGATRON}.tensor_model_parallel_size=4",
        f"{MEGATRON}.pipeline_model_parallel_size=8",
        f"{MEGATRON}.expert_model_parallel_size=4",
        f"{MEGATRON}.param_offload=True",
        f"{MEGATRON}.optimizer_offload=True",
        f"+{override}.num_layers_in_first_pipeline_stage=11",
        f"+{override}.num_layers_in_last_pipeline_stage=11",
        f"{override}.recompute_granularity=full",
        f"{override}.recompute_method=uniform",
        f"{override}.recompute_num_layers=1",
        f"{ACTOR}.use_dynamic_bsz=True",
        f"{ACTOR}.ppo_max_token_len_per_gpu=12288",
        "data.max_prompt_length=8192",
        "data.max_response_length=4096",
        f"{ROLLOUT}.tensor_model_parallel_size=8",
        f"{ROLLOUT}.gpu_memory_utilization=0.75",
        *extra,
    ]


def test_qwen3_235b_demo_breaks_the_expert_layout_rules():
    result = plan(composed(qwen3_235b_demo([f"{ROLLOUT}.expert_parallel_size=64"])), QWEN3_235B_A22B)
    assert any("[ETP×EP×PP divides the world size] 4×4×8 = 128" in error for error in result.errors)
    assert any("[rollout EP equals TP×DP] EP 64, TP×DP = 8" in error for error in result.errors)


@pytest.mark.slow
def test_qwen3_235b_needs_megatron_cpu_optimizer_on_64_gpus():
    fixed = [f"{MEGATRON}.expert_tensor_parallel_size=1"]
    result = plan(composed(qwen3_235b_demo(fixed)), QWEN3_235B_A22B)
    assert not result.fits and "largest term: weights+grads+optimizer" in result.verdict
    assert "optimizer_cpu_offload=True" in result.verdict
    cpu_optimizer = [
        "+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload=True",
        "+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_offload_fraction=1.0",
        f"{ROLLOUT}.data_parallel_size=8",
        f"{ROLLOUT}.expert_parallel_size=64",
    ]
    result = plan(composed(qwen3_235b_demo(fixed + cpu_optimizer)), QWEN3_235B_A22B)
    assert result.fits, result.verdict


def test_standalone_rollout_pool_keeps_no_actor_state():
    overrides = FSDP_RECIPE + [f"{ROLLOUT}.nnodes=1", f"{ROLLOUT}.n_gpus_per_node=8"]
    result = plan(composed(overrides), QWEN2_5_7B)
    assert "vLLM kept during training" not in {term.name for term in result.training_terms}
    assert any(line.startswith("rollout phase:") and "actor kept 0.00 GiB" in line for line in result.lines)


def test_plain_dict_config_and_missing_key():
    cfg = OmegaConf.to_container(composed(FSDP_RECIPE))
    assert plan(cfg, QWEN2_5_7B).fits
    del cfg["data"]["max_prompt_length"]
    with pytest.raises(ValueError, match="data.max_prompt_length"):
        plan(cfg, QWEN2_5_7B)


def run_cli(tmp_path: Path, overrides: list[str]) -> subprocess.CompletedProcess:
    config_yaml = tmp_path / "config.yaml"
    config_yaml.write_text(OmegaConf.to_yaml(composed(overrides)))
    (tmp_path / "config.json").write_text(json.dumps(QWEN2_5_7B))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "verl_recipes.planner", str(config_yaml), str(tmp_path), "--gpu-mem", "80"]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)


@pytest.mark.slow
def test_cli_exit_status_follows_the_verdict(tmp_path):
    fits = run_cli(tmp_path, FSDP_RECIPE)
    assert fits.returncode == 0, fits.stderr
    assert fits.stdout.splitlines()[-1].startswith("fits:")
    does_not = run_cli(tmp_path, SEED_MEGATRON)
    assert does_not.returncode == 1, does_not.stderr
    assert "83.27 GiB" in does_not.stdout and does_not.stdout.splitlines()[-1].startswith("does not fit:")

"""Smoke gates on real verl 0.9.1 metrics (the H200 tiny runs, committed) and on broken copies of them."""

import json
from pathlib import Path

import pytest

from verl_recipes import catalog, entrypoints
from verl_recipes.check import gates
from verl_recipes.smoke.run import dry_run

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "results/smoke/qwen25-7b-grpo-v1.tiny-h200.metrics.jsonl"
CHECKS = REPO / "recipes/qwen25-7b-grpo/v1/checks.yaml"


def test_the_real_run_passes_every_gate():
    assert gates.evaluate(gates.read_metrics(REAL), 2, gates.load_gates(CHECKS, tiny=True)) == []


@pytest.mark.parametrize("breakage, named", [
    (lambda steps: steps[2].pop("actor/grad_norm"), "step 2: metric 'actor/grad_norm' is missing"),
    (lambda steps: steps[1].update({"actor/pg_loss": float("nan")}), "step 1: 'actor/pg_loss' = nan is not finite"),
    (lambda steps: steps[1].update({"response_length/mean": 0.0}), "'response_length/mean' = 0.0 is below"),
    (lambda steps: steps.pop(2), "steps [2] have no metrics"),
    (lambda steps: steps[2].pop("timing_s/ref"), "metric 'timing_s/ref' is missing"),  # from the recipe's checks.yaml
])
def test_a_broken_run_names_the_failing_metric(breakage, named):
    steps = gates.read_metrics(REAL)
    breakage(steps)
    failures = gates.evaluate(steps, 2, gates.load_gates(CHECKS, tiny=True))
    assert any(named in f for f in failures), failures


RUNS = sorted((REPO / "results/smoke").glob("*-v1.tiny-*.metrics.jsonl"))


@pytest.mark.parametrize("metrics", RUNS, ids=lambda p: p.name.split(".metrics")[0])
def test_every_recorded_tiny_run_passes_its_recipes_gates(metrics):
    """Agreement bounds included: every colocated run logs verl's train/rollout metrics, Megatron ones too."""
    checks = REPO / "recipes" / metrics.name.split("-v1")[0] / "v1/checks.yaml"
    assert gates.evaluate(gates.read_metrics(metrics), 2, gates.load_gates(checks, tiny=True)) == []


def test_the_separate_async_vl_run_passes_its_gates():
    """The 2-GPU tiny run of qwen25-vl-7b-geo3k-dapo:separate_async (2 x H200, 2026-11-26): bypass mode, so no
    train/rollout agreement metrics; staleness 0 then 0.75."""
    steps = gates.read_metrics(REPO / "results/smoke/qwen25-vl-7b-geo3k-dapo-v1-separate_async.tiny-2xh200.metrics.jsonl")
    checks = REPO / "recipes/qwen25-vl-7b-geo3k-dapo/v1/checks.yaml"
    assert gates.evaluate(steps, 2, gates.load_gates(checks, tiny=True, variant="separate_async", bypass=True)) == []
    assert steps[2]["training/off_policy/trajectory_staleness/mean"] > 0  # the rollout ran ahead of the trainer


def test_the_megatron_variant_run_passes_its_gates():
    steps = gates.read_metrics(REPO / "results/smoke/qwen25-7b-grpo-v1-megatron.tiny-4xh100.metrics.jsonl")
    assert gates.evaluate(steps, 2, gates.load_gates(CHECKS, tiny=True, variant="megatron")) == []


@pytest.mark.parametrize("metric, value", [("training/rollout_probs_diff_mean", 0.05),
                                           ("training/rollout_actor_probs_pearson_corr", 0.9),
                                           ("rollout_corr/k3_kl", 0.2)])
def test_a_rollout_that_disagrees_with_the_trainer_fails_naming_the_bound(metric, value):
    """A weight push that never reaches vLLM leaves the rollout on the old weights: agreement breaks."""
    steps = gates.read_metrics(REPO / "results/smoke/qwen3-30b-a3b-grpo-v1.tiny-4xh100.tp2-ep2.metrics.jsonl")
    steps[2][metric] = value
    checks = REPO / "recipes/qwen3-30b-a3b-grpo/v1/checks.yaml"
    bound, side = next((b, s) for m, b, s in gates.AGREEMENT if m == metric)
    assert gates.evaluate(steps, 2, gates.load_gates(checks, tiny=True)) == [
        f"step 2: '{metric}' = {value} is outside its bound ({side} {bound})"]


@pytest.mark.parametrize("name", ["retool-qwen25-7b", "deepeyes-qwen25-vl-7b"])
def test_an_agent_run_without_a_tool_call_fails_naming_num_turns(name):
    steps = gates.read_metrics(REPO / f"results/smoke/{name}-v1.tiny-h200.metrics.jsonl")
    steps[2]["num_turns/max"] = 2  # every trajectory answered without a call
    failures = gates.evaluate(steps, 2, gates.load_gates(REPO / f"recipes/{name}/v1/checks.yaml", tiny=True))
    assert failures == ["step 2: 'num_turns/max' = 2 is below 3"]


def test_bad_metrics_file_names_file_and_line(tmp_path):
    bad = tmp_path / "m.jsonl"
    bad.write_text(json.dumps({"step": 1, "data": {}}) + "\nnot json\n")
    with pytest.raises(ValueError, match="m.jsonl:2: not JSON"):
        gates.read_metrics(bad)
    with pytest.raises(FileNotFoundError, match="no metrics file"):
        gates.read_metrics(tmp_path / "absent.jsonl")


@pytest.mark.slow
def test_dry_run_prints_and_proves_the_smoke_config(capsys):
    assert dry_run(catalog.get("qwen25-7b-grpo"), "") == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen2.5-0.5B-Instruct" in out and "# ok: qwen25-7b-grpo/v1 smoke config" in out


def test_the_fully_async_run_passes_with_its_one_step_metrics_lag():
    """The 2-GPU tiny run of qwen25-7b-grpo:async (verl exited 0): verl logs step k's training metrics at step k + 1."""
    steps = gates.read_metrics(REPO / "results/smoke/qwen25-7b-grpo-v1-async.tiny-2xh200.metrics.jsonl")
    async_gates = gates.load_gates(CHECKS, tiny=True, variant="async", bypass=True)  # no agreement metrics
    assert "timing_s/old_log_prob" not in async_gates["present"]  # old log-probs come from the rollout
    assert gates.evaluate(steps, 2, async_gates, lag=entrypoints.get(catalog.get(
        "qwen25-7b-grpo", variant="async").entrypoint).metrics_lag) == []
    assert any("step 1: metric 'actor/grad_norm' is missing" in f for f in gates.evaluate(steps, 2, async_gates))


def test_a_logger_list_without_the_file_logger_is_refused_with_the_fix():
    from verl_recipes import catalog
    from verl_recipes.check.recipe import check

    errors = check(catalog.get("qwen25-7b-grpo"), "trainer.logger=[console,wandb]")
    assert len(errors) == 1 and "'trainer.logger' = ['console', 'wandb'] has no 'file'" in errors[0]
    assert "use trainer.logger=[console,wandb,file]" in errors[0]
    assert check(catalog.get("qwen25-7b-grpo"), "trainer.logger=[console,wandb,file]") == []


@pytest.mark.representative
@pytest.mark.parametrize("spec", ["qwen25-7b-grpo", "qwen25-7b-grpo:megatron", "qwen25-7b-grpo:async"])
def test_tiny_smokes_start_no_dataloader_workers(spec, tmp_path):
    """The 'exit 0' gate: a worker killed at teardown, after the last step, made a good Megatron run exit 1."""
    from verl_recipes.compose import compose
    from verl_recipes.smoke.run import smoke_args

    recipe = catalog.parse(spec)
    assert compose(recipe, smoke_args(recipe, tmp_path)).data.dataloader_num_workers == 0

"""The end-to-end bench on CPU: its forced response lengths, its report from verl's metrics, and every arm proven."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from verl_recipes.bench import e2e_inputs, e2e_report, lengths, model_shape
from verl_recipes.check.gates import read_metrics
from verl_recipes.runtime.response_lengths import ForcedLengths, response_target

FIXTURE = Path(__file__).parent / "fixtures/bench/e2e.metrics.jsonl"
RESULTS = Path(__file__).parent.parent / "bench/results"
MAX = 2048
SMALL_MAX, SMALL_MEDIAN = 256, 125  # the bench's 2048 / 1000, scaled down 8x so the simulation is quick


def test_forced_lengths_follow_the_bench_distribution():
    # 200 prompts x 5 samples, as a GRPO step sends them
    prompts = [[i, i + 1, i + 2] for i in range(200) for _ in range(5)]
    forced = ForcedLengths(median=SMALL_MEDIAN)
    realised = np.array([forced.target(prompt, SMALL_MAX) for prompt in prompts])
    target = lengths.sample(20000, max_response=SMALL_MAX, median=SMALL_MEDIAN, seed=1).responses
    assert abs(np.median(realised) / np.median(target) - 1) < 0.1  # median ~1000
    # at the maximum: the 10% spike plus the log-normal's clip above it (0.9 x 21%)
    assert abs((realised == SMALL_MAX).mean() - (target == SMALL_MAX).mean()) < 0.04
    assert abs(realised.mean() / target.mean() - 1) < 0.06
    groups = realised.reshape(200, 5)
    assert (groups.min(1) < groups.max(1)).mean() > 0.95  # a group's samples get different lengths


def test_same_prompts_get_the_same_lengths_in_any_order_and_form():
    first, again = ForcedLengths(), ForcedLengths()
    group = [first.target([7, 8], MAX) for _ in range(5)]
    assert len(set(group)) > 1 and max(group) <= MAX  # a GRPO group's samples differ
    # another server (arm) that gets the group as an array, a tensor and lists, after another prompt: the same lengths
    again.target([9], MAX)
    forms = [np.array([7, 8]), torch.tensor([7, 8]), [7, 8], (7, 8), [np.int64(7), 8]]
    assert [again.target(prompt, MAX) for prompt in forms] == group
    assert all(ForcedLengths().target([7, 8], cap) <= cap for cap in (1, 16, 100))


def test_response_target_matches_the_sampled_distribution():
    drawn = np.array([response_target(key, MAX) for key in range(5000)])
    sampled = lengths.sample(5000, max_response=MAX, seed=0).responses
    assert abs(np.median(drawn) / np.median(sampled) - 1) < 0.05
    assert abs((drawn == MAX).mean() - (sampled == MAX).mean()) < 0.02


def test_prompts_have_the_bench_lengths(tmp_path):
    from transformers import AutoTokenizer

    config = model_shape.write("qwen2.5-1.5b", tmp_path, weights=False)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    for row, length in zip(e2e_inputs.rows("train", 3, seed=0), lengths.sample(3, max_response=1, seed=0).prompts):
        ids = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
        assert len(ids) == length
    last = config.vocab_size - 1  # any id a random model samples decodes
    assert tok.decode([300, last, config.eos_token_id]) == f"x300x{last}<|im_end|>"


def test_report_reduces_verl_metrics_after_the_warmup_step():
    found = e2e_report.reduce(read_metrics(FIXTURE), samples=1280)
    assert found["steps_logged"] == 4 and found["steps_reported"] == 3 and found["samples_per_step"] == 320
    assert found["step_s"] == 60.0 and found["samples_per_s"] == pytest.approx(320 / 60)
    # the whole run counts the warm-up step too
    assert found["steps_s"] == [90.0, 50.0, 70.0, 60.0] and found["train_s"] == 270.0
    assert found["samples_per_s_whole_run"] == pytest.approx(1280 / 270)
    assert found["phases_s"] == {"gen": 25.0, "old_log_prob": 6.0, "step": 60.0, "update_actor": 22.0}
    assert found["mfu"] == {"actor": 0.28, "actor_infer": pytest.approx(0.22)}
    assert found["throughput_tokens_per_s_per_gpu"] == 1800.0
    assert found["response_length"]["mean"] == pytest.approx(1300.0)
    assert found["staleness"] == {"training/off_policy/trajectory_staleness/mean": pytest.approx(0.5)}


def test_fully_async_rollouter_rows_are_not_training_steps():
    """verl's fully async run (GPU, 2026-11-26): the Rollouter logs rows of its own, one of them (step 0) before any
    training; the trainer logs one row per weight version of 4 updates x 16 prompts x 5 samples."""
    metrics = read_metrics(RESULTS / "e2e.async.4xh200.2026-11-26.metrics.jsonl")
    assert "timing_s/step" not in metrics[0] and "fully_async/rollouter/version_time" in metrics[0]
    found = e2e_report.reduce(metrics, samples=960)
    assert found["steps_logged"] == 3 and found["samples_per_step"] == 320  # not 960 / 4 rows
    assert found["train_s"] == pytest.approx(sum(found["steps_s"]))


@pytest.mark.parametrize("path", sorted(p for p in RESULTS.glob("e2e.*.json") if "-vs-" not in p.name),
                         ids=lambda p: p.name)
def test_committed_reports_are_their_metrics_reduced(path):
    import json

    result = json.loads(path.read_text())
    metrics = read_metrics(path.with_name(path.name.removesuffix(".json") + ".metrics.jsonl"))
    assert result["report"] == json.loads(json.dumps(e2e_report.reduce(metrics, result["conditions"]["samples"])))


def test_compare_names_each_arm_and_its_steps(tmp_path, monkeypatch):
    import json

    from verl_recipes.bench import e2e

    monkeypatch.setenv("OUT", str(tmp_path))
    arms = [RESULTS / f"e2e.{arm}.4xh200.2026-11-26.json" for arm in ("separate_async", "colocated_2gpu")]
    assert e2e.main(["--compare", *map(str, arms)]) == 0
    found = json.loads((tmp_path / "e2e.separate_async-vs-colocated_2gpu.json").read_text())
    assert found["arms"]["colocated_2gpu"]["steps_s"] == [70.479, 40.102, 39.539]
    assert found["ratios"]["trained samples/s, whole run"]["speedup"] == pytest.approx(150.12 / 152.92, abs=1e-3)


def test_ratios_name_their_factors_and_say_which_way_is_better():
    fast = e2e_report.reduce(read_metrics(FIXTURE), samples=1280)
    slow = {**fast, "step_s": 120.0, "samples_per_s": 320 / 120}
    found = e2e_report.ratios(fast, slow, "ours", "verl_example")
    assert found["step time"] == {"speedup": 2.0, "factors": "ours 60 vs verl_example 120"}
    assert found["trained samples/s"]["speedup"] == 2.0


@pytest.fixture(scope="module")
def dry_run_of_every_arm() -> subprocess.CompletedProcess:
    """`make bench-e2e DRY=1`: every arm composed and proven in one process (~2 s an arm after the first)."""
    return subprocess.run([sys.executable, "-m", "verl_recipes.bench.e2e", "--cpu-dry-run"],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_dry_run_proves_verl_example_settings(dry_run_of_every_arm):
    assert "# ok: verl_example" in dry_run_of_every_arm.stdout
    assert "verl.trainer.main_ppo" in dry_run_of_every_arm.stdout


@pytest.mark.slow
def test_dry_run_proves_every_arm(dry_run_of_every_arm):
    from verl_recipes.bench.e2e_arms import ARMS

    done = dry_run_of_every_arm
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.removeprefix("# ok: ") for line in done.stdout.splitlines() if line.startswith("# ok: ")] == list(ARMS)
    assert "fully_async_main" in done.stdout
    # the lever arms carry their fragment, and the math-changing ones say so
    assert "# ---- ours_bypass: qwen25-7b-grpo/v1 +configs/perf=bypass_old_log_prob (changes the math: opt-in)" \
        in done.stdout

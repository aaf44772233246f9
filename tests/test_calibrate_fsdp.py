"""tests/gpu/calibrate_fsdp.py: the CPU dry run through verl's FSDP2 engine, and the fit that turns measured peaks
into planner constants (checked on peaks synthesised from the planner with known constants)."""

import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from verl_recipes.planner import fsdp_memory
from verl_recipes.planner.model_shape import hf_total_params, model_shape

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "tests" / "gpu" / "calibrate_fsdp.py"
# Load by path: site-packages has its own `tests` package.
_spec = importlib.util.spec_from_file_location("calibrate_fsdp", SCRIPT)
calibrate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calibrate)

GIB = 2**30
TOKENS = [2048, 4096, 8192, 16384]
QWEN_1_5B = model_shape(REPO_ROOT / "models/Qwen/Qwen2.5-1.5B-Instruct")
QWEN_0_5B_UNTIED = model_shape({**json.loads((REPO_ROOT / "models/Qwen/Qwen2.5-0.5B-Instruct/config.json").read_text()),
                                "tie_word_embeddings": False})
TRUE_CONSTANTS = [
    {"FSDP_ACTIVATION_SCALE": 1.0, "LOGITS_BYTES_PER_TOKEN_PER_VOCAB": 6, "FSDP_GATHERED_UNITS": 2},
    {"FSDP_ACTIVATION_SCALE": 2.5, "LOGITS_BYTES_PER_TOKEN_PER_VOCAB": 10, "FSDP_GATHERED_UNITS": 5},
    {"FSDP_ACTIVATION_SCALE": 0.6, "LOGITS_BYTES_PER_TOKEN_PER_VOCAB": 4, "FSDP_GATHERED_UNITS": 1},
]


def synthetic_arms(shape, constants, optimizer_bytes_per_param=0.0, fused_settings=(False, True)):
    """Arms as the GPU run records them, with forward/backward peaks that the planner gives under `constants`."""
    optimizer_peak = optimizer_bytes_per_param * hf_total_params(shape) / GIB
    arms = []
    for fused in fused_settings:
        for tokens in TOKENS:
            line = calibrate.planner_terms(shape, tokens, fused, constants)["total_minus_context_gib"]
            arms.append(
                {
                    "use_fused_kernels": fused,
                    "tokens": tokens,
                    "oom": False,
                    "static_gib": 12 * hf_total_params(shape) / GIB,
                    "forward_backward_peak_gib": line,
                    "optimizer_step_peak_gib": optimizer_peak,
                    "peak_gib": max(line, optimizer_peak),
                }
            )
    return arms


@pytest.mark.parametrize("shape", [QWEN_1_5B, QWEN_0_5B_UNTIED], ids=["1.5b-tied", "0.5b-untied"])
@pytest.mark.parametrize("constants", TRUE_CONSTANTS)
def test_fit_recovers_the_constants_behind_the_peaks(shape, constants):
    summary = calibrate.analyse(shape, synthetic_arms(shape, constants))
    assert summary["derived_constants"] == pytest.approx(constants, rel=1e-6)
    assert summary["within_10pct_derived"] is True
    unfused = summary["fits"]["unfused"]
    assert unfused["slope_bytes_per_token"] == pytest.approx(
        calibrate.planner_terms(shape, 1, False, constants)["total_gib"] * GIB
        - calibrate.planner_terms(shape, 0, False, constants)["total_gib"] * GIB
    )


def test_wrong_constants_show_up_as_errors_and_the_derived_ones_fix_them():
    arms = synthetic_arms(QWEN_1_5B, TRUE_CONSTANTS[1])
    summary = calibrate.analyse(QWEN_1_5B, arms)
    assert summary["within_10pct_current"] is False  # the file's constants (scale 1, logits 6) under-estimate
    largest_unfused = [arm for arm in arms if not arm["use_fused_kernels"]][-1]
    assert largest_unfused["error_pct"] < -10
    assert abs(largest_unfused["derived_error_pct"]) < 1e-6


def test_optimizer_step_floor_is_reported_apart_from_the_line():
    """AdamW's step temporaries put a token-independent floor under the peak; the line fit must ignore it."""
    arms = synthetic_arms(QWEN_1_5B, TRUE_CONSTANTS[0], optimizer_bytes_per_param=20)
    summary = calibrate.analyse(QWEN_1_5B, arms)
    assert summary["derived_constants"] == pytest.approx(TRUE_CONSTANTS[0], rel=1e-6)
    assert summary["optimizer_step_bytes_per_param"] == pytest.approx(20)
    assert summary["within_10pct_derived"] is False  # the 2k arms peak in the optimizer step
    assert summary["within_10pct_derived_with_optimizer_floor"] is True


def test_without_fused_arms_the_activation_slope_stays_the_planners_and_the_logits_are_still_found():
    """The logits' moment comes after the recomputed layer's, so the unfused line alone gives the logits' bytes."""
    arms = synthetic_arms(QWEN_1_5B, TRUE_CONSTANTS[1], fused_settings=(False,))
    derived = calibrate.analyse(QWEN_1_5B, arms)["derived_constants"]
    assert derived["FSDP_ACTIVATION_SCALE"] == pytest.approx(fsdp_memory.FSDP_ACTIVATION_SCALE)
    assert derived["LOGITS_BYTES_PER_TOKEN_PER_VOCAB"] == pytest.approx(
        TRUE_CONSTANTS[1]["LOGITS_BYTES_PER_TOKEN_PER_VOCAB"]
    )


def test_patched_constants_do_not_leak_into_the_planner():
    before = calibrate.planner_terms(QWEN_1_5B, 8192, False)["total_gib"]
    patched = calibrate.planner_terms(QWEN_1_5B, 8192, False, TRUE_CONSTANTS[1])["total_gib"]
    assert patched > before
    assert fsdp_memory.FSDP_ACTIVATION_SCALE == 1.0 and fsdp_memory.FSDP_GATHERED_UNITS == 2
    assert calibrate.planner_terms(QWEN_1_5B, 8192, False)["total_gib"] == before


def test_results_note_shows_fit_constants_and_ends_with_the_comparison():
    arms = synthetic_arms(QWEN_1_5B, TRUE_CONSTANTS[1], optimizer_bytes_per_param=20)
    arms.append({"use_fused_kernels": True, "tokens": 32768, "oom": True})
    summary = calibrate.analyse(QWEN_1_5B, arms)
    settings = [{"use_fused_kernels": fused, "engine_build_s": 9.0, "warmup_step_s": 1.0} for fused in (False, True)]
    report = {
        "model": "qwen2.5-1.5b",
        "hardware": "NVIDIA H100 80GB HBM3",
        "date": "2026-11-21T00:00:00+00:00",
        "torch": "2.11.0+cu130",
        "transformers": "5.17.0",
        "verl": "0.9.1",
        "strategy": "fsdp2",
        "world_size": 1,
        "attn_implementation": "sdpa",
        "use_remove_padding": False,
        "logits_path": "logprobs_from_logits_v2",
        "wall_s": 150.0,
        "settings": settings,
        "arms": arms,
        "summary": summary,
    }
    note = calibrate.results_note(report)
    assert "| LOGITS_BYTES_PER_TOKEN_PER_VOCAB | 6 | 10.000 |" in note
    assert "| FSDP_ACTIVATION_SCALE | 1.0 | 2.500 |" in note
    assert "Optimizer-step peak: 20.00 B/param" in note
    assert "current constants False, derived False, derived + optimizer-step floor True" in note
    last_rows = note.rstrip().splitlines()[-2:]
    assert last_rows[0].startswith("| True | 16384 |") and last_rows[0].endswith(" | 0.0 |")
    assert last_rows[1].startswith("| True | 32768 | OOM | OOM |")


@pytest.mark.parametrize("xs, ys", [([1, 2], [3, 5]), ([2048, 4096, 8192], [10.0, 12.0, 16.0])])
def test_fit_line_is_exact_on_a_line(xs, ys):
    intercept, slope = calibrate.fit_line(xs, ys)
    assert [intercept + slope * x for x in xs] == pytest.approx(ys)


def test_fit_line_needs_two_budgets():
    with pytest.raises(ValueError, match="at least 2 measured token budgets"):
        calibrate.fit_line([2048], [10.0])


def test_token_batch_is_one_micro_batch_of_full_sequences():
    data = calibrate.token_batch(96, 32, vocab_size=512, fused=True, remove_padding=False)
    assert data["input_ids"].offsets().diff().tolist() == [32, 32, 32]
    assert int(data["loss_mask"].sum()) == 48  # the response half of every sequence
    assert data["micro_batch_size_per_gpu"] == 3 and data["global_batch_size"] == 3
    assert data["use_fused_kernels"] is True and data["use_remove_padding"] is False
    assert float(data["old_log_probs"].mean()) == pytest.approx(-math.log(512), abs=0.1)


def test_token_budget_must_fill_whole_sequences():
    with pytest.raises(ValueError, match="--tokens 100 must be a multiple of --seq-len 32"):
        calibrate.token_batch(100, 32, vocab_size=512, fused=False, remove_padding=False)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


@pytest.mark.slow
def test_cpu_dry_run_trains_through_verl_fsdp2_with_and_without_fused_kernels(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "MASTER_PORT": free_port(), "PYTHONPATH": str(REPO_ROOT)}
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu-dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    note = (tmp_path / "calibrate_fsdp.md").read_text()
    assert run.stdout.rstrip().endswith(note.rstrip())  # the note, comparison table last, ends the output
    assert note.rstrip().splitlines()[-1].startswith("| True | 128 | n/a |")
    report = json.loads((tmp_path / "calibrate_fsdp.json").read_text())
    assert report["hardware"] == "cpu (dry run)" and report["verl"] == "0.9.1"
    assert {"torch", "transformers", "date"} <= report.keys()
    assert [(arm["use_fused_kernels"], arm["tokens"]) for arm in report["arms"]] == [
        (False, 64),
        (False, 128),
        (True, 64),
        (True, 128),
    ]
    for arm in report["arms"]:
        assert not arm["oom"] and math.isfinite(arm["grad_norm"]) and arm["grad_norm"] > 0
        assert "peak_gib" not in arm  # no CUDA memory on CPU
        per_vocab = 0 if arm["use_fused_kernels"] else fsdp_memory.LOGITS_BYTES_PER_TOKEN_PER_VOCAB
        vocab = report["hf_config"]["vocab_size"]  # the tiny Qwen2's
        assert arm["estimate"]["logits_gib"] == pytest.approx(arm["tokens"] * per_vocab * vocab / GIB)
    assert report["summary"]["derived_constants"] is None

"""tests/gpu/liger_numerics.py's verdict, on CPU: what it compares and where its bound sits (the GPU run is committed in
bench/results/liger_numerics.*)."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("liger_numerics", REPO / "tests/gpu/liger_numerics.py")
numerics = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(numerics)


def test_errors_are_measured_against_fp32_and_between_the_bf16_paths():
    reference = torch.tensor([-1.0, -2.0, -3.0, -0.5])
    unfused = reference + torch.tensor([0.01, -0.02, 0.0, 0.01])
    liger = reference + torch.tensor([0.0, 0.03, -0.01, 0.0])
    result = numerics.compare(unfused, liger, reference)
    assert result["tokens"] == 4
    assert result["unfused_vs_fp32"] == pytest.approx({"mean": 0.01, "max": 0.02})
    assert result["liger_vs_fp32"] == pytest.approx({"mean": 0.01, "max": 0.03})
    assert result["liger_vs_unfused"]["max"] == pytest.approx(0.05)


def test_the_committed_run_sits_inside_its_bound():
    record = json.loads(next((REPO / "bench/results").glob("liger_numerics.*.json")).read_text())
    floor, error = record["unfused_vs_fp32"]["mean"], record["liger_vs_fp32"]["mean"]
    assert record["passed"] and error <= numerics.BOUND * floor + numerics.TIE
    assert record["grad_cosine"] >= numerics.MIN_GRAD_COSINE and record["hardware"].startswith("NVIDIA")

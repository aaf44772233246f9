"""The report on a real verl 0.9.1 run's file logger output (the tiny smoke on one H200, committed)."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "results/smoke/qwen25-7b-grpo-v1.tiny-h200.metrics.jsonl"


def test_report_reads_a_real_run(tmp_path):
    png = tmp_path / "stages.png"
    out = subprocess.run([sys.executable, "-m", "verl_recipes.perf.report", str(REAL), "--png", str(png)], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    logged = json.loads(REAL.read_text().splitlines()[1])["data"]  # step 1, as verl logged it
    step1 = next(line for line in out.splitlines() if line.startswith("1 "))
    assert step1.split()[1] == f"{logged['timing_s/gen']:.2f}" and f"{logged['timing_s/step']:.2f}" in step1
    assert "timing_s/reward is absent" in out
    assert png.stat().st_size > 20_000

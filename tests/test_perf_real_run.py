"""The report on a real verl 0.9.1 run's file logger output (the tiny smoke on one H200, committed)."""

import json
from pathlib import Path

from verl_recipes.perf import report

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "results/smoke/qwen25-7b-grpo-v1.tiny-h200.metrics.jsonl"


def test_report_reads_a_real_run(tmp_path, capsys):
    png = tmp_path / "stages.png"
    assert report.main([str(REAL), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    logged = json.loads(REAL.read_text().splitlines()[1])["data"]  # step 1, as verl logged it
    step1 = next(line for line in out.splitlines() if line.startswith("1 "))
    assert step1.split()[1] == f"{logged['timing_s/gen']:.2f}" and f"{logged['timing_s/step']:.2f}" in step1
    assert "timing_s/reward is absent" in out
    assert png.stat().st_size > 20_000

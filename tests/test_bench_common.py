"""What both benchmarks share: the length distribution, the ceilings probe and the report."""

import json

import numpy as np
import pytest

from verl_recipes.bench import ceilings, lengths, report


def test_lengths_are_seeded_and_within_bounds():
    first = lengths.sample(500, max_response=4096, seed=3)
    again = lengths.sample(500, max_response=4096, seed=3)
    other = lengths.sample(500, max_response=4096, seed=4)
    assert np.array_equal(first.prompts, again.prompts) and np.array_equal(first.responses, again.responses)
    assert not np.array_equal(first.responses, other.responses)
    assert first.prompts.min() >= 100 and first.prompts.max() <= 600
    assert first.responses.min() >= 1 and first.responses.max() == 4096


@pytest.mark.parametrize("num", [10, 128, 1000])
def test_at_least_a_tenth_sits_at_max_response(num):
    sample = lengths.sample(num, max_response=4096, seed=0)
    at_max = int((sample.responses == 4096).sum())
    assert round(0.1 * num) <= at_max <= round(0.1 * num) + 0.05 * num + 2  # the spike, plus what the clip adds


def test_untruncated_responses_follow_the_log_normal():
    sample = lengths.sample(20000, max_response=10**7, seed=0)
    body = sample.responses[sample.responses < 10**7]
    assert np.median(body) == pytest.approx(1000, rel=0.05)
    assert np.std(np.log(body)) == pytest.approx(0.9, rel=0.05)


def test_summary_reports_the_realised_distribution():
    sample = lengths.sample(64, max_response=2048, seed=1)
    summary = sample.summary()
    assert summary["sequences"] == 64 and summary["response_max"] == 2048
    assert summary["total_tokens"] == int(sample.prompts.sum() + sample.responses.sum())
    json.dumps(summary)


def test_lengths_refuse_bad_bounds():
    with pytest.raises(ValueError, match="min_prompt"):
        lengths.sample(4, max_response=32, min_prompt=20, max_prompt=10)


def test_ceilings_on_cpu_are_positive_and_named():
    result = ceilings.measure(cpu_dry_run=True, repeats=3)
    assert result["device"] == "cpu (dry run)" and result["gemm_tflops"] > 0 and result["copy_gbps"] > 0


def test_table_aligns_columns_and_formats_floats():
    text = report.table([{"arm": "ours", "x": 1234.5678, "ok": True}, {"arm": "padded", "x": None}], [
        ("arm", "arm"), ("x", "tok/s"), ("ok", "held")
    ])
    lines = text.splitlines()
    assert lines[0].split() == ["arm", "tok/s", "held"]
    assert lines[1].split() == ["ours", "1.23e+03", "True"] and lines[2].split() == ["padded", "-", "-"]
    assert len({len(line) for line in lines}) == 1


def test_write_json_goes_to_out_and_takes_numpy_values(tmp_path, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    assert report.write_json("x", {}) is None
    monkeypatch.setenv("OUT", str(tmp_path))
    path = report.write_json("x", {"held": np.bool_(True), "value": np.float64(1.5), "list": np.arange(3)})
    assert json.loads(open(path).read()) == {"held": True, "value": 1.5, "list": [0, 1, 2]}

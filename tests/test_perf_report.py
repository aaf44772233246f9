"""verl_recipes.perf.report on the committed verl file-logger fixture, on rollout dumps, and on bad input."""

import json
from pathlib import Path

import pytest

from verl_recipes.perf import report
from verl_recipes.perf.stages import step_stages

FIXTURE = Path(__file__).parent / "fixtures" / "perf" / "metrics.jsonl"
STAGE_KEYS = ["gen", "update_weights", "old_log_prob", "ref", "adv", "update_actor"]


def run(capsys, *args):
    code = report.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def table_rows(out: str, title_start: str) -> dict[str, dict[str, str]]:
    """The rows of the table under the line starting with title_start, keyed by first cell, as header -> cell."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title_start))
    rule = lines[start + 2]
    spans, col = [], 0
    for width in (len(dashes) for dashes in rule.split("  ")):
        spans.append((col, col + width))
        col += width + 2
    cells = lambda line: [line[a:b].strip() for a, b in spans]  # noqa: E731
    headers = cells(lines[start + 1])
    rows = {}
    for line in lines[start + 3 :]:
        if not line.strip():
            break
        row = cells(line.ljust(col))
        rows[row[0]] = dict(zip(headers, row))
    return rows


def raw_steps():
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    return {line["step"]: line["data"] for line in lines if "timing_s/step" in line["data"]}


def test_fixture_is_verl_file_logger_format():
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    assert len(lines) == 7 and all(set(line) == {"step", "data"} for line in lines)
    assert lines[0] == {"step": 0, "data": {"val-core/openai/gsm8k/acc/mean@1": 0.7134, "val-aux/num_turns/mean": 2.0}}
    assert [line["step"] for line in lines[1:]] == [1, 2, 3, 4, 5, 6]


def test_stage_table_values_for_the_seed_step(capsys):
    code, out, _ = run(capsys, FIXTURE)
    assert code == 0
    rows = table_rows(out, "Stage seconds per step")
    assert list(rows) == ["1", "2", "3", "4", "5", "6", "mean", "% of step"]
    step2 = rows["2"]
    assert {k: step2[k] for k in ["gen", "update_weights", "reward", "old_log_prob", "ref", "adv", "update_actor"]} == {
        "gen": "154.22",
        "update_weights": "1.77",
        "reward": "-",
        "old_log_prob": "49.14",
        "ref": "24.87",
        "adv": "0.41",
        "update_actor": "172.19",
    }
    assert step2["other"] == "14.33"  # 416.93 - (154.22 + 1.77 + 49.14 + 24.87 + 0.41 + 172.19)
    assert step2["step s"] == "416.93"
    assert step2["MFU %"] == "30.3"
    assert step2["tok/s/GPU"] == "2448"
    assert rows["% of step"]["step s"] == "100.0"


def test_other_is_step_minus_the_stage_sum_in_every_step(capsys):
    _, out, _ = run(capsys, FIXTURE)
    rows = table_rows(out, "Stage seconds per step")
    for step, data in raw_steps().items():
        expected = data["timing_s/step"] - sum(data[f"timing_s/{name}"] for name in STAGE_KEYS)
        assert float(rows[str(step)]["other"]) == pytest.approx(expected, abs=0.006)
    _, stage_rows, _ = step_stages(raw_steps())
    for row in stage_rows:
        assert row.other + sum(v for v in row.seconds.values() if v is not None) == pytest.approx(row.total)


def test_long_tail_table_and_absent_metric_notes(capsys):
    _, out, _ = run(capsys, FIXTURE)
    tail = table_rows(out, "Long tail")
    data = raw_steps()[3]
    assert tail["3"]["resp mean"] == f"{data['response_length/mean']:.0f}"
    assert tail["3"]["resp max"] == "8192"
    assert tail["3"]["clip %"] == f"{100 * data['response_length/clip_ratio']:.1f}"
    assert tail["3"]["peak mem GB"] == f"{data['actor/perf/max_memory_allocated_gb']:.1f}"
    assert "- timing_s/reward is absent in every step (column 'reward' shows -)" in out
    assert "V1 trainer logs none" in out  # no per-rank generate time in 0.9.1 V1 metrics


def test_step_range_selects_inclusive_steps(capsys):
    _, out, _ = run(capsys, FIXTURE, "--steps", "2:3")
    rows = table_rows(out, "Stage seconds per step")
    assert list(rows) == ["2", "3", "mean", "% of step"]
    assert rows["mean"]["gen"] == f"{(154.22 + 149.70) / 2:.2f}"
    _, out, _ = run(capsys, FIXTURE, "--steps", "5:")
    assert list(table_rows(out, "Stage seconds per step"))[:2] == ["5", "6"]


def test_png_is_written_and_not_blank(tmp_path, capsys):
    from PIL import Image

    png = tmp_path / "report.png"
    code, out, _ = run(capsys, FIXTURE, "--png", png)
    assert code == 0 and f"wrote {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(png).convert("RGB")
    assert image.size[0] > 800 and image.size[1] > 600
    assert len(image.getcolors(maxcolors=1 << 24)) > 50  # bars, text and legend, not an empty canvas


def write_rollout_dump(folder: Path, step: int, outputs: list[str]) -> None:
    """The shape verl's V1 `_write_generations` writes to <rollout_data_dir>/<step>.jsonl."""
    folder.mkdir(exist_ok=True)
    with open(folder / f"{step}.jsonl", "w") as f:
        for i, text in enumerate(outputs):
            f.write(json.dumps({"input": "q", "output": text, "gts": "1", "score": 1.0, "step": step, "uid": f"u_{i}_0"}) + "\n")


def test_rollout_dir_gives_percentiles_and_histogram(tmp_path, capsys):
    from PIL import Image

    dump = tmp_path / "rollout"
    write_rollout_dump(dump, 2, ["x" * n for n in range(1, 101)])
    write_rollout_dump(dump, 3, ["y" * 1000])
    write_rollout_dump(dump, 9, ["z" * 5])  # outside --steps 2:3
    png = tmp_path / "hist.png"
    code, out, _ = run(capsys, FIXTURE, "--steps", "2:3", "--rollout-dir", dump, "--png", png)
    assert code == 0
    assert "101 samples in 2 file(s), unit characters" in out
    stats = next(iter(table_rows(out, "Response-length distribution").values()))
    assert stats["max"] == "1000" and stats["p50"] == "51"
    assert Image.open(png).size[0] > 800


def make_word_tokenizer(folder: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "a": 1, "b": 2}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    return folder


def test_rollout_lengths_in_tokens_with_a_tokenizer(tmp_path, capsys):
    dump = tmp_path / "rollout"
    write_rollout_dump(dump, 1, ["a b a", "b", "a b c d e f"])
    tokenizer = make_word_tokenizer(tmp_path / "tok")
    code, out, _ = run(capsys, FIXTURE, "--steps", "1:1", "--rollout-dir", dump, "--tokenizer", tokenizer)
    assert code == 0 and "3 samples in 1 file(s), unit tokens" in out
    stats = next(iter(table_rows(out, "Response-length distribution").values()))
    assert stats["max"] == "6" and stats["mean"] == f"{(3 + 1 + 6) / 3:.0f}"


def test_missing_metrics_are_named_not_fatal(tmp_path, capsys):
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(json.dumps({"step": 1, "data": {"timing_s/step": 10.0, "timing_s/gen": 4.0, "perf/mfu/actor": None}}) + "\n")
    code, out, _ = run(capsys, metrics)
    assert code == 0
    rows = table_rows(out, "Stage seconds per step")
    assert rows["1"]["other"] == "6.00" and rows["1"]["MFU %"] == "-"
    assert "perf/mfu/actor is absent in every step" in out
    assert "perf/throughput is absent in every step" in out
    assert "response_length/mean is absent in every step" in out


def test_legacy_agent_loop_sample_times_are_shown(tmp_path, capsys):
    data = {
        "timing_s/step": 10.0,
        "timing_s/gen": 6.0,
        "timing_s/agent_loop/generate_sequences/min": 0.5,
        "timing_s/agent_loop/generate_sequences/mean": 2.0,
        "timing_s/agent_loop/generate_sequences/max": 5.75,
        "timing_s/agent_loop/slowest/response_length": 4096,
        "timing_s/testing": 30.0,
    }
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(json.dumps({"step": 4, "data": data}) + "\n")
    _, out, _ = run(capsys, metrics)
    sample = table_rows(out, "Per-sample generate seconds")["4"]
    assert sample["max s"] == "5.75" and sample["slowest resp len"] == "4096"
    assert "timing_s/testing ran outside timing_s/step" in out
    assert table_rows(out, "Stage seconds per step")["4"]["other"] == "4.00"  # testing and agent_loop/* not subtracted


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "no such file"),
        ("", "file is empty"),
        ('{"step": 1, "data": {"timing_s/step": 1.0}}\n{"step": 2, "data": {oops}\n', ":2: not valid JSON"),
        ('{"step": 1, "data": {"timing_s/step": 1.0}}\n[1, 2]\n', ":2: expected {\"step\": <int>, \"data\": {...}}"),
        ('{"step": "1", "data": {}}\n', ":1: expected"),
        ('{"step": 0, "data": {"val-core/x/acc/mean@1": 0.5}}\n', "no line has 'timing_s/step'"),
    ],
)
def test_bad_metrics_file_names_file_and_line(tmp_path, capsys, content, expected):
    metrics = tmp_path / "metrics.jsonl"
    if content is not None:
        metrics.write_text(content)
    code, out, err = run(capsys, metrics)
    assert code == 2 and out == ""
    assert str(metrics) in err and expected in err


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--steps", "2-3"], "--steps '2-3': expected 'a:b'"),
        (["--steps", "40:50"], "selects no logged step; the log has steps 1..6"),
        (["--png", "/nonexistent-dir/x.png"], "--png /nonexistent-dir/x.png: directory /nonexistent-dir does not exist"),
        (["--rollout-dir", "/nonexistent-dir"], "--rollout-dir /nonexistent-dir: no such directory"),
    ],
)
def test_bad_arguments_are_named(capsys, args, expected):
    code, _, err = run(capsys, FIXTURE, *args)
    assert code == 2 and expected in err


def test_bad_rollout_line_names_file_and_line(tmp_path, capsys):
    dump = tmp_path / "rollout"
    write_rollout_dump(dump, 2, ["ok"])
    with open(dump / "2.jsonl", "a") as f:
        f.write('{"input": "q", "score": 1.0}\n')
    code, _, err = run(capsys, FIXTURE, "--rollout-dir", dump)
    assert code == 2 and f"{dump / '2.jsonl'}:2: expected an object with a string 'output'" in err

"""verl_recipes.perf.torch_trace: GPU time attributed to the phase that launched it, busy vs idle, kernel kinds, on a
hand-built chrome trace whose answer is known; bad files and windows fail with the file or range named."""

import gzip
import json

import pytest

from verl_recipes.perf import torch_trace
from verl_recipes.perf.torch_trace import TraceError

MAIN, AUTOGRAD, STREAM = (1, 10), (1, 20), (0, 7)
PHASES = [("optimizer", "Optimizer.step"), ("backward", "autograd::engine::evaluate_function"),
          ("log-prob", "logprobs_from_logits"), ("forward", "micro_batch")]


def cpu(name, start, end, thread=MAIN, category="user_annotation"):
    return {"ph": "X", "cat": category, "name": name, "pid": thread[0], "tid": thread[1], "ts": start, "dur": end - start}


def launch(correlation, time, thread=MAIN):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": thread[0], "tid": thread[1],
            "ts": time, "dur": 2, "args": {"correlation": correlation}}


def gpu(name, correlation, start, duration, category="kernel"):
    return {"ph": "X", "cat": category, "name": name, "pid": STREAM[0], "tid": STREAM[1], "ts": start, "dur": duration,
            "args": {"correlation": correlation}}


EVENTS = [  # times in microseconds, as torch writes them
    cpu("train_batch", 0, 1000),
    cpu("micro_batch0", 10, 500),
    cpu("logprobs_from_logits", 200, 300),  # nested in the micro-batch: the log-prob phase wins
    cpu("autograd::engine::evaluate_function: MmBackward0", 510, 700, AUTOGRAD, "cpu_op"),
    cpu("Optimizer.step#AdamW.step", 800, 900),
    launch(1, 50), launch(2, 250), launch(3, 600, AUTOGRAD), launch(4, 850), launch(5, 950), launch(6, 1200),
    gpu("sm90_xmma_gemm_bf16bf16", 1, 60, 100),
    gpu("void at::native::cunn_SoftMaxForward", 2, 260, 40),
    gpu("void pytorch_flash::flash_bwd_kernel<cutlass::bfloat16_t>", 3, 610, 50),
    gpu("multi_tensor_apply_kernel", 4, 860, 20),
    gpu("Memcpy DtoD (Device -> Device)", 5, 955, 10, "gpu_memcpy"),
    gpu("elementwise_kernel", 6, 1300, 30),  # after the window: not counted
    gpu("elementwise_kernel", 99, 100, 20),  # no launch in the trace; overlaps the GEMM, so busy time is unchanged
    {"ph": "i", "name": "instant", "ts": 5},  # not a timed event: ignored
]


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": EVENTS}, handle)
    return path


def test_each_kernel_goes_to_the_phase_that_launched_it(trace):
    summary = torch_trace.summarize(trace, PHASES, window="train_batch")
    gpu_us = {name: round(phase.gpu_s * 1e6) for name, phase in summary.phases.items()}
    assert gpu_us == {"optimizer": 20, "backward": 50, "log-prob": 40, "forward": 100, "other": 30}
    assert {name: phase.gpu_events for name, phase in summary.phases.items()} == {
        "optimizer": 1, "backward": 1, "log-prob": 1, "forward": 1, "other": 2}
    assert summary.unattributed_launches == 1 and summary.gpu_events == 6


def test_busy_is_the_union_of_gpu_intervals_within_the_window(trace):
    summary = torch_trace.summarize(trace, PHASES, window="train_batch")
    assert summary.wall_s == pytest.approx(1000e-6)
    assert summary.busy_s == pytest.approx(220e-6)  # 100 + 40 + 50 + 20 + 10; the overlapping kernel adds nothing
    assert summary.idle_s == pytest.approx(780e-6) and summary.busy_fraction == pytest.approx(0.22)


def test_phase_ranges_and_spans(trace):
    phases = torch_trace.summarize(trace, PHASES, window="train_batch").phases
    assert {name: round(phase.range_s * 1e6) for name, phase in phases.items()} == {
        "optimizer": 100, "backward": 190, "log-prob": 100, "forward": 490, "other": 0}
    assert {name: phase.ranges for name, phase in phases.items()} == {
        "optimizer": 1, "backward": 1, "log-prob": 1, "forward": 1, "other": 0}
    assert phases["other"].gpu_span_s == pytest.approx((965 - 100) * 1e-6)  # first start to last end


def test_kinds_put_flash_attention_before_its_cutlass_name(trace):
    kinds = torch_trace.summarize(trace, PHASES, window="train_batch").kinds
    assert {kind: round(seconds * 1e6) for kind, seconds in kinds.items()} == {
        "gemm": 100, "attention": 50, "other": 80, "memcpy/memset": 10}


def test_whole_trace_window_and_annotations(trace):
    summary = torch_trace.summarize(trace)
    assert summary.wall_s == pytest.approx(1330e-6)  # 0 .. the last kernel's end
    assert summary.phases == {"other": summary.phases["other"]} and summary.phases["other"].gpu_events == 7
    assert summary.annotations[0] == ("train_batch", 1, pytest.approx(1000e-6))


def test_nested_ranges_of_one_phase_still_cover_a_launch():
    ranges = torch_trace.Ranges([(0, 100), (10, 20), (30, 40)])
    assert ranges.covers(50) and ranges.covers(100) and not ranges.covers(101) and not ranges.covers(-1)


def test_bad_input_names_the_file_or_the_range(tmp_path, trace, capsys):
    with pytest.raises(TraceError, match="no range named 'update'"):
        torch_trace.summarize(trace, window="update")
    not_json = tmp_path / "x.json"
    not_json.write_text("{")
    with pytest.raises(TraceError, match="x.json: not a readable chrome trace"):
        torch_trace.summarize(not_json)
    other_json = tmp_path / "y.json"
    other_json.write_text('{"events": []}')
    with pytest.raises(TraceError, match="y.json: no 'traceEvents'"):
        torch_trace.summarize(other_json)
    assert torch_trace.main([str(trace), "--window", "nope"]) == 2
    assert "no range named 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        torch_trace.main([str(trace), "--phase", "no-equals-sign"])


def test_cli_prints_every_phase(trace, capsys):
    args = [str(trace), "--window", "train_batch"] + [f"--phase={name}={prefix}" for name, prefix in PHASES]
    assert torch_trace.main(args) == 0
    out = capsys.readouterr().out
    assert "GPU busy 0.000 s (22%)" in out
    for name, _ in PHASES:
        assert f"  {name}: " in out

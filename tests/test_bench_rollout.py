"""verl_recipes.bench.rollout and verl_recipes.bench.decode_floor: the HBM floor reproduces a hand computation, the admission loop
keeps at most B requests in flight, and --cpu-dry-run runs every arm process and reports against the floor."""

import os
import sys
import time

import pytest
from conftest import run_dry

from verl_recipes import random_models
from verl_recipes.bench import decode_floor, rollout

H100_COPY_BYTES_PER_S = 3.0e12
H100_GEMM_FLOPS = 774e12


@pytest.fixture(scope="module")
def cost():
    return decode_floor.DecodeCost.of(random_models.hub_config("Qwen/Qwen2.5-1.5B-Instruct"))


def test_decode_cost_of_qwen25_1_5b_matches_the_guide(cost):
    assert cost.kv_bytes_per_token == 28672  # 28 KiB
    assert cost.weight_bytes == pytest.approx(3.09e9, rel=2e-3)


def test_one_decode_step_at_b64_c2048_matches_the_guide(cost):
    """By hand: Qwen2.5-1.5B on an H100, B=64, context 2048 -> 2.3 ms per step, 28.0 k tokens/s."""
    prompts = [2047] * 64

    def floor(response):
        return decode_floor.floor_seconds(prompts, [response] * 64, 64, cost, H100_COPY_BYTES_PER_S, H100_GEMM_FLOPS)

    step = floor(2) - floor(1)  # the second step: every context is 2048, no prefill any more
    assert step == pytest.approx(2.3e-3, rel=0.02)
    assert 64 / step == pytest.approx(28.0e3, rel=0.02)


def test_more_concurrency_never_raises_the_floor_and_serial_is_the_sum(cost):
    prompts, responses = [100, 300, 50, 700], [400, 10, 900, 200]
    serial = decode_floor.floor_seconds(prompts, responses, 1, cost, H100_COPY_BYTES_PER_S, H100_GEMM_FLOPS)
    alone = sum(
        decode_floor.floor_seconds([p], [r], 1, cost, H100_COPY_BYTES_PER_S, H100_GEMM_FLOPS)
        for p, r in zip(prompts, responses)
    )
    assert serial == pytest.approx(alone)
    floors = [
        decode_floor.floor_seconds(prompts, responses, b, cost, H100_COPY_BYTES_PER_S, H100_GEMM_FLOPS)
        for b in (1, 2, 4)
    ]
    assert floors[0] > floors[1] > floors[2]


def test_floor_refuses_bad_input(cost):
    with pytest.raises(ValueError, match="concurrency"):
        decode_floor.floor_seconds([1], [1], 0, cost, 1.0, 1.0)
    with pytest.raises(ValueError, match="as many prompts as responses"):
        decode_floor.floor_seconds([1, 2], [1], 1, cost, 1.0, 1.0)


class RecordingEngine(rollout.TinyEngine):
    """TinyEngine that remembers the most requests it ever held, and can be told to cut responses short."""

    def __init__(self, cut_short=False):
        super().__init__(vocab_size=64)
        self.most_in_flight, self.cut_short = 0, cut_short

    def submit(self, request_id, prompt_ids, max_tokens):
        super().submit(request_id, prompt_ids, max_tokens - 1 if self.cut_short and max_tokens > 1 else max_tokens)
        self.most_in_flight = max(self.most_in_flight, len(self.running))


@pytest.mark.parametrize("concurrency", [1, 3, 50])
def test_generate_caps_requests_in_flight_and_counts_every_token(concurrency):
    engine = RecordingEngine()
    max_tokens = [5, 1, 9, 3, 7, 2, 8]
    result = rollout.generate(engine, [[7, 8, 9]] * len(max_tokens), max_tokens, concurrency)
    assert engine.most_in_flight == min(concurrency, len(max_tokens))
    assert result["output_tokens"] == sum(max_tokens) and result["wrong_lengths"] == 0


def test_generate_counts_requests_that_stopped_early():
    result = rollout.generate(RecordingEngine(cut_short=True), [[1]] * 3, [4, 1, 6], concurrency=2)
    assert result["wrong_lengths"] == 2


def test_arms_differ_only_in_graphs_and_memory():
    kwargs = {arm: rollout.engine_kwargs(arm, max_model_len=2648, max_num_seqs=256) for arm in rollout.ARMS}
    assert kwargs["eager"]["enforce_eager"] and "compilation_config" not in kwargs["eager"]
    for arm in ("ours", "verl_default"):
        assert kwargs[arm]["compilation_config"] == {"cudagraph_mode": "FULL_AND_PIECEWISE"}
    assert (kwargs["ours"]["gpu_memory_utilization"], kwargs["verl_default"]["gpu_memory_utilization"]) == (0.7, 0.5)
    assert all(k["load_format"] == "dummy" and k["skip_tokenizer_init"] for k in kwargs.values())


def test_engine_kwargs_are_vllm_engine_args():
    vllm_args = pytest.importorskip("vllm.engine.arg_utils")
    fields = set(vllm_args.EngineArgs.__dataclass_fields__)
    for arm in rollout.ARMS:
        assert set(rollout.engine_kwargs(arm, 2648, 256)) <= fields


def test_vllm_profiler_config_is_what_verls_rollout_server_builds_from_our_preset(tmp_path):
    """configs/profiling/torch_rollout through verl's build_vllm_profiler_args: torch, engine iterations [0, 64),
    no stacks or shapes, traces in the replica's folder (vLLM 0.24 took it and wrote traces on the GPU, bench/README.md)."""
    config = rollout.vllm_profiler_config(str(tmp_path))
    assert config["profiler"] == "torch" and (config["delay_iterations"], config["max_iterations"]) == (0, 64)
    assert not config["torch_profiler_with_stack"] and not config["torch_profiler_record_shapes"]
    assert config["torch_profiler_dir"] == str(tmp_path / "agent_loop_rollout_replica_0")


def test_profiled_decode_step_against_its_floor(cost):
    """62 decode iterations at B=64 that took 0.16 s of kernels over a 0.21 s span, on an H100."""
    args = rollout.parse_args(["--profile", "--profile-concurrency", "64"])
    profile = {"phases": {"decode": {"ranges": 62, "gpu_s": 0.16, "gpu_span_s": 0.21}}}
    step = rollout.profiled_decode_step(profile, args, cost, H100_COPY_BYTES_PER_S, H100_GEMM_FLOPS)
    level = rollout.level_lengths(64, args)
    context = level.prompts[:64].sum() + 64 * 31  # prompts plus half the profiled iterations
    floor = (cost.weight_bytes + cost.kv_bytes_per_token * context) / H100_COPY_BYTES_PER_S  # memory-bound at B=64
    assert step["floor_s"] == pytest.approx(floor)
    assert step["kernel_s"] == pytest.approx(0.16 / 62) and step["span_s"] == pytest.approx(0.21 / 62)
    assert step["kernels_of_floor"] == pytest.approx(floor / (0.16 / 62))
    assert rollout.profiled_decode_step({"phases": {"decode": {"ranges": 0}}}, args, cost, 1, 1) == {"iterations": 0}


@pytest.mark.slow
def test_cpu_dry_run_reports_every_arm_against_the_floor(tmp_path):
    stdout, result = run_dry(["-m", "verl_recipes.bench.rollout", "--cpu-dry-run", "--profile"], tmp_path, "rollout.json")
    assert list(result["arms"]) == list(rollout.ARMS) and result["checks"]["arms_failed"] == []
    assert result["checks"]["every_request_got_its_length"]
    for arm in result["arms"].values():
        assert set(arm["levels"]) == {"2", "8"}
        for concurrency, level in arm["levels"].items():
            assert level["requests"] == 2 * int(concurrency)
            assert 0 < level["floor_seconds"]
            assert level["fraction_of_floor"] == pytest.approx(level["floor_seconds"] / level["seconds"])
    assert "ours fraction of HBM floor, B=8" in result["goals"]
    assert "ours / eager (CUDA graphs), B=2" in result["goals"]
    assert all(arm["profile"] == {"error": "no profiler on the CPU stand-in engine"} for arm in result["arms"].values())
    assert stdout.rstrip().splitlines()[-1].lstrip().startswith("ours fraction of HBM floor, B=8")


@pytest.mark.slow
def test_run_bounded_kills_the_whole_process_group(tmp_path):
    """An arm's vLLM engine runs in a grandchild process: a timeout must take it down too."""
    marker = tmp_path / "grandchild-survived"
    grandchild = f"import time; time.sleep(3); open({str(marker)!r}, 'w')"
    child = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(30)"
    assert rollout.run_bounded([sys.executable, "-c", child], dict(os.environ), timeout=1) == "timeout"
    time.sleep(3.5)
    assert not marker.exists()
    assert rollout.run_bounded([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ), timeout=30) == 3

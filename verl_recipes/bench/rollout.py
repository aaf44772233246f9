"""Rollout: vLLM 0.24 offline generation, eager vs our CUDA-graph settings, 0.5 vs 0.7 memory, against the HBM floor.

A random-init Qwen2.5-1.5B-shaped model (no weights; load_format="dummy", skip_tokenizer_init, token-id
prompts) generates lengths imposed from verl_recipes.bench.lengths (ignore_eos, per-request max_tokens) in three arms:
  ours          enforce_eager=False (CUDA graphs + torch.compile), gpu_memory_utilization=0.7
                (configs/rollout/vllm.yaml)
  eager         enforce_eager=True, gpu_memory_utilization=0.7: ours without graphs
  verl_default  enforce_eager=False, gpu_memory_utilization=0.5: verl 0.9.1's rollout defaults
All arms share verl's other engine settings (bf16, chunked prefill, max_num_batched_tokens 8192, prefix
caching, cudagraph_mode FULL_AND_PIECEWISE where graphs are on, max_num_seqs 256). Each arm runs in its own
process, one engine, at several concurrencies: at most B requests in flight, the next admitted when one
finishes (what max_num_seqs=B does with a long queue; one engine serves every B). Every level replays the
same 2 x B requests in every arm. Reported: output tokens/s and the fraction of the HBM floor
(verl_recipes.bench.decode_floor with the copy bandwidth and GEMM rate measured by verl_recipes.bench.ceilings in this run).
With --profile, each arm then replays --profile-concurrency of those requests, cut to --profile-tokens each, under
vLLM's torch profiler configured as verl's rollout server configures it from our preset
configs/profiling/torch_rollout (engine iterations [0, 64)), and reports where those iterations' time went
(verl_recipes.perf.torch_trace: GPU busy vs idle, kernel kinds, vLLM's own stage annotations).

    python -m verl_recipes.bench.rollout                 # on the GPU machine (kit on PYTHONPATH), ~5-6 minutes
    python -m verl_recipes.bench.rollout --cpu-dry-run   # CPU stand-in engine, same orchestration and report, < 1 minute
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from verl_recipes import bench
from verl_recipes.bench import ceilings, decode_floor, lengths, model_shape, report, verl_actor
from verl_recipes.perf import torch_trace

ARMS = {  # run in this order: what the goals need first
    "ours": dict(enforce_eager=False, gpu_memory_utilization=0.7),
    "eager": dict(enforce_eager=True, gpu_memory_utilization=0.7),
    "verl_default": dict(enforce_eager=False, gpu_memory_utilization=0.5),
    # against per-step CPU overhead: schedule step n+1 while step n runs on the GPU (vLLM's async_scheduling)
    "async_scheduling": dict(enforce_eager=False, gpu_memory_utilization=0.7, async_scheduling=True),
}
PROFILE_FRAGMENT = "configs/profiling/torch_rollout"
PROFILE_PHASES = [  # vLLM 0.24 names each engine iteration execute_context_<n>(<tokens>)_generation_<n>(<tokens>)
    ("decode", "execute_context_0(0)_generation_"),  # no prompt tokens in the iteration
    ("with prefill", "execute_context_"),
]
GRAPH_SPEEDUP_TARGET = 1.17  # NVIDIA's RL pipeline tuning talk: CUDA graphs cut generate time ~17%
FLOOR_FRACTION_TARGET = 0.70  # our goal: >= 70% of the HBM floor at B >= 64 (bench/README.md)


def engine_kwargs(arm: str, max_model_len: int, max_num_seqs: int) -> dict:
    """LLM(...) arguments: the arm's two settings on top of what verl's vLLM server passes."""
    settings = ARMS[arm]
    kwargs = dict(
        dtype="bfloat16",
        load_format="dummy",
        skip_tokenizer_init=True,
        seed=0,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        enable_chunked_prefill=True,
        max_num_batched_tokens=8192,
        enable_prefix_caching=True,
        **settings,
    )
    if not settings["enforce_eager"]:
        kwargs["compilation_config"] = {"cudagraph_mode": "FULL_AND_PIECEWISE"}  # verl's vllm_async_server default
    return kwargs


def vllm_profiler_config(trace_dir: str) -> dict:
    """vLLM's profiler_config as verl 0.9.1's rollout server builds it (build_vllm_profiler_args) from our preset,
    with traces under trace_dir. One change: no key_averages table at stop (slow on a long trace; not read)."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.profiler.config import build_vllm_profiler_args

    rollout = verl_actor.compose(trace_dir, [f"global_profiler.save_path={trace_dir}"], (PROFILE_FRAGMENT,)).rollout
    profiler = omega_conf_to_dataclass(rollout.profiler)  # its tool_config entries are dataclasses already
    config = json.loads(build_vllm_profiler_args(profiler, profiler.tool_config[profiler.tool], rank=0,
                                                 legacy_env=False)["profiler_config"])
    return {**config, "torch_profiler_dump_cuda_time_total": False}


class VllmEngine:
    """vLLM's offline LLM; requests go to its LLMEngine directly so that the caller can cap concurrency."""

    def __init__(self, model_path: str, kwargs: dict):
        from vllm import LLM

        self.llm = LLM(model=model_path, **kwargs)
        self.engine = self.llm.llm_engine
        cache = self.engine.vllm_config.cache_config
        self.kv_capacity_tokens = (cache.num_gpu_blocks or 0) * cache.block_size
        # what the engine resolved, defaults included (the arms set only a few keys)
        scheduler, compilation = self.engine.vllm_config.scheduler_config, self.engine.vllm_config.compilation_config
        self.resolved = {"async_scheduling": getattr(scheduler, "async_scheduling", None),
                         "cudagraph_capture_sizes": list(getattr(compilation, "cudagraph_capture_sizes", None) or [])[-3:]}

    def submit(self, request_id: str, prompt_ids: list[int], max_tokens: int) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            max_tokens=max_tokens,
            ignore_eos=True,
            temperature=1.0,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        self.engine.add_request(request_id, {"prompt_token_ids": prompt_ids}, params)

    def finished(self) -> list[tuple[str, int]]:
        """(request id, generated tokens) of the requests that finished in the next engine step."""
        return [(out.request_id, len(out.outputs[0].token_ids)) for out in self.engine.step() if out.finished]


class TinyEngine:
    """CPU stand-in for --cpu-dry-run with VllmEngine's calls: a tiny random next-token model, one token per
    running request per step, so the admission loop, the checks and the report run without vLLM or a GPU."""

    kv_capacity_tokens = None
    resolved = {}

    def __init__(self, vocab_size: int):
        generator = torch.Generator().manual_seed(0)
        self.embedding = torch.randn(vocab_size, 16, generator=generator)
        self.head = torch.randn(16, vocab_size, generator=generator)
        self.running = {}  # request id -> (last token, tokens still to generate, generated so far)

    def submit(self, request_id: str, prompt_ids: list[int], max_tokens: int) -> None:
        self.running[request_id] = (prompt_ids[-1], max_tokens, 0)

    def finished(self) -> list[tuple[str, int]]:
        ids = list(self.running)
        if not ids:
            return []
        last = torch.tensor([self.running[request_id][0] for request_id in ids])
        next_tokens = (self.embedding[last] @ self.head).argmax(-1).tolist()
        done = []
        for request_id, token in zip(ids, next_tokens):
            _, left, generated = self.running[request_id]
            if left == 1:
                del self.running[request_id]
                done.append((request_id, generated + 1))
            else:
                self.running[request_id] = (token, left - 1, generated + 1)
        return done


def level_lengths(concurrency: int, args) -> lengths.Lengths:
    """The lengths of the 2 x B requests of one concurrency level, identical in every arm (seeded by B)."""
    return lengths.sample(
        2 * concurrency, args.max_response, args.min_prompt, args.max_prompt, args.median, seed=concurrency
    )


def level_requests(concurrency: int, args) -> tuple[lengths.Lengths, list[list[int]]]:
    """The 2 x B requests of one concurrency level, their prompts random ids of the model's vocabulary."""
    level = level_lengths(concurrency, args)
    rng = np.random.default_rng(concurrency)
    prompts = [rng.integers(3, args.vocab_size, size=int(n)).tolist() for n in level.prompts]
    return level, prompts


def generate(engine, prompts: list[list[int]], max_tokens: list[int], concurrency: int) -> dict:
    """Run every request, keeping at most `concurrency` in flight; checks each got exactly its max_tokens."""
    next_request, in_flight, output_tokens, wrong_lengths = 0, 0, 0, 0
    start = time.perf_counter()
    while next_request < len(prompts) or in_flight:
        while next_request < len(prompts) and in_flight < concurrency:
            engine.submit(str(next_request), prompts[next_request], int(max_tokens[next_request]))
            next_request, in_flight = next_request + 1, in_flight + 1
        for request_id, generated in engine.finished():
            in_flight -= 1
            output_tokens += generated
            wrong_lengths += generated != max_tokens[int(request_id)]
    seconds = time.perf_counter() - start
    return {
        "requests": len(prompts),
        "output_tokens": output_tokens,
        "seconds": seconds,
        "tokens_per_s": output_tokens / seconds,
        "wrong_lengths": wrong_lengths,
    }


def profiled_replay(engine, args, trace_dir: str) -> dict:
    """The level B = --profile-concurrency's first B requests, each cut to --profile-tokens, under the engine's
    profiler (which stops itself after the preset's iterations); the worker's trace summarized by iteration kind."""
    _, prompts = level_requests(args.profile_concurrency, args)
    count = args.profile_concurrency
    engine.llm.start_profile()
    generate(engine, prompts[:count], [args.profile_tokens] * count, count)
    engine.llm.stop_profile()
    traces = sorted(Path(trace_dir).rglob("*.json*"))
    if not traces:
        return {"error": f"the profiler wrote no trace under {trace_dir}"}
    summary = torch_trace.summarize(traces[-1], PROFILE_PHASES, window=None)
    return {"concurrency": count, "tokens_per_request": args.profile_tokens, "trace": traces[-1].name, **summary.as_dict()}


def run_arm(args) -> dict:
    """Child process: one engine for the arm, a short warm-up, then every concurrency level until the deadline."""
    started = time.perf_counter()
    kwargs = engine_kwargs(args.arm, args.max_prompt + args.max_response, max(args.concurrencies))
    if args.profiler_config:  # built by the parent: verl's import initializes CUDA, which vLLM's fork cannot inherit
        kwargs["profiler_config"] = json.loads(args.profiler_config)
    if args.cpu_dry_run:
        engine = TinyEngine(args.vocab_size)
    else:
        engine = VllmEngine(args.model_path, kwargs)
    result = {
        "engine_kwargs": kwargs,
        "init_seconds": time.perf_counter() - started,
        "kv_capacity_tokens": engine.kv_capacity_tokens,
        "resolved": engine.resolved,
        "levels": {},
    }
    warmup_prompts = [[3 + i] * 16 for i in range(8)]
    generate(engine, warmup_prompts, [16] * len(warmup_prompts), concurrency=8)
    for concurrency in args.concurrencies:
        if time.time() > args.deadline:
            result["levels"][str(concurrency)] = {"skipped": "time budget spent"}
            continue
        level, prompts = level_requests(concurrency, args)
        result["levels"][str(concurrency)] = generate(engine, prompts, level.responses.tolist(), concurrency)
        print(f"[{args.arm}] B={concurrency}: {result['levels'][str(concurrency)]}", flush=True)
    if args.profile:
        result["profile"] = (profiled_replay(engine, args, kwargs["profiler_config"]["torch_profiler_dir"])
                             if not args.cpu_dry_run
                             else {"error": "no profiler on the CPU stand-in engine"})
    return result


def run_bounded(command: list[str], env: dict, timeout: float):
    """Run command in its own process group; past timeout the whole group (vLLM's engine process too) is killed,
    so that it cannot hold on to GPU memory that the next arm needs. Returns the exit code or "timeout"."""
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return process.wait(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return "timeout"


def run_children(args, model_path: str, deadline: float) -> dict:
    """Each arm in its own process (a fresh engine and GPU memory each); a failed arm is reported, not fatal."""
    env = bench.child_env()
    arms = {}
    for arm in args.arms:
        if time.time() > deadline:
            arms[arm] = {"error": "not run: time budget spent"}
            continue
        with tempfile.NamedTemporaryFile(suffix=".json") as result_file:
            command = [sys.executable, "-m", "verl_recipes.bench.rollout", "--arm", arm, "--result", result_file.name]
            command += ["--model-path", model_path, "--deadline", str(deadline)]
            command += ["--max-response", str(args.max_response), "--shape", args.shape]
            command += ["--concurrencies", ",".join(map(str, args.concurrencies))]
            if args.profile:
                command += ["--profile", "--profile-concurrency", str(args.profile_concurrency)]
                command += ["--profile-tokens", str(args.profile_tokens)]
                if not args.cpu_dry_run:
                    config = vllm_profiler_config(tempfile.mkdtemp(prefix=f"rollout-{arm}-"))
                    command += ["--profiler-config", json.dumps(config)]
            command += ["--cpu-dry-run"] if args.cpu_dry_run else []
            print(f"== arm {arm}: {' '.join(command)}", flush=True)
            code = run_bounded(command, env, timeout=deadline - time.time() + args.grace_s)
            if code == 0:
                with open(result_file.name) as handle:
                    arms[arm] = json.load(handle)
            else:
                arms[arm] = {"error": f"arm process ended with {code}; its log is above"}
    return arms


def profiled_decode_step(profile: dict, args, cost, bandwidth: float, peak: float) -> dict:
    """The profiled decode iterations against one decode step's floor (all B requests running, at their mean
    context over the window: prompt + half the iterations). Per iteration: kernel time (GPU busy) and the span
    from one iteration's first kernel to the next one's (GPU busy + idle); idle is per-step overhead."""
    decode = profile["phases"]["decode"]
    iterations = decode["ranges"]
    if not iterations:
        return {"iterations": 0}
    count = args.profile_concurrency
    level = level_lengths(count, args)
    context = float(level.prompts[:count].sum()) + count * iterations / 2
    floor = cost.step_seconds(count, 0, context, bandwidth, peak)
    kernel_s, span_s = decode["gpu_s"] / iterations, decode["gpu_span_s"] / iterations
    return {"iterations": iterations, "floor_s": floor, "kernel_s": kernel_s, "span_s": span_s,
            "kernels_of_floor": floor / kernel_s, "span_of_floor": floor / span_s}


def summarize(arms: dict, args, config, hardware: dict) -> tuple[dict, dict]:
    """Adds the HBM floor of the model (its HF config) to every level; returns the goals and the checks."""
    cost = decode_floor.DecodeCost.of(config)
    bandwidth, peak = hardware["copy_gbps"] * 1e9, hardware["gemm_tflops"] * 1e12
    for concurrency in args.concurrencies:
        level = level_lengths(concurrency, args)
        floor = decode_floor.floor_seconds(level.prompts, level.responses, concurrency, cost, bandwidth, peak)
        for arm in arms.values():
            measured = arm.get("levels", {}).get(str(concurrency), {})
            if "seconds" in measured:
                measured.update(floor_seconds=floor, fraction_of_floor=floor / measured["seconds"])
    for arm in arms.values():
        if "phases" in arm.get("profile", {}):
            arm["profile"]["decode_step"] = profiled_decode_step(arm["profile"], args, cost, bandwidth, peak)

    def tokens_per_s(arm, concurrency):
        return arms.get(arm, {}).get("levels", {}).get(str(concurrency), {}).get("tokens_per_s")

    goals = {}
    for concurrency in args.concurrencies:
        ours, eager, default = (tokens_per_s(arm, concurrency) for arm in ("ours", "eager", "verl_default"))
        speedup = ours / eager if ours and eager else None
        goals[f"ours / eager (CUDA graphs), B={concurrency}"] = {
            "value": speedup,
            "target": GRAPH_SPEEDUP_TARGET,
            "held": bool(speedup is not None and speedup >= GRAPH_SPEEDUP_TARGET),
        }
        goals[f"ours / verl_default (memory 0.7 vs 0.5), B={concurrency}"] = {
            "value": ours / default if ours and default else None,
            "target": None,
            "held": None,
        }
        scheduled = tokens_per_s("async_scheduling", concurrency)
        goals[f"async_scheduling / ours, B={concurrency}"] = {
            "value": scheduled / ours if ours and scheduled else None,
            "target": None,
            "held": None,
        }
        if concurrency >= args.floor_goal_min:
            fraction = arms.get("ours", {}).get("levels", {}).get(str(concurrency), {}).get("fraction_of_floor")
            goals[f"ours fraction of HBM floor, B={concurrency}"] = {
                "value": fraction,
                "target": FLOOR_FRACTION_TARGET,
                "held": bool(fraction is not None and fraction >= FLOOR_FRACTION_TARGET),
            }
    measured = [level for arm in arms.values() for level in arm.get("levels", {}).values() if "seconds" in level]
    checks = {
        "arms_failed": sorted(name for name, arm in arms.items() if "error" in arm),
        "levels_skipped": sum("skipped" in level for arm in arms.values() for level in arm.get("levels", {}).values()),
        "every_request_got_its_length": bool(measured) and all(level["wrong_lengths"] == 0 for level in measured),
    }
    return goals, checks


def print_tables(payload: dict) -> None:
    settings = payload["settings"]
    print(f"\nrollout on {payload['hardware']}, {payload['model']['shape']}, max_response {settings['max_response']}")
    print(
        f"ceilings: copy {payload['ceilings']['copy_gbps']} GB/s, GEMM {payload['ceilings']['gemm_tflops']} TFLOP/s; "
        f"checks {payload['checks']}"
    )
    rows = []
    for name, arm in payload["arms"].items():
        if "error" in arm:
            rows.append({"arm": name, "B": "-", "skipped": arm["error"]})
            continue
        for concurrency, level in arm["levels"].items():
            rows.append(
                dict(arm=name, B=concurrency, init_s=arm["init_seconds"], kv_tokens=arm["kv_capacity_tokens"], **level)
            )
    columns = [
        ("arm", "arm"),
        ("B", "B"),
        ("tokens_per_s", "out tok/s"),
        ("fraction_of_floor", "of HBM floor"),
        ("seconds", "run s"),
        ("floor_seconds", "floor s"),
        ("requests", "requests"),
        ("kv_tokens", "KV tokens"),
        ("init_s", "init s"),
        ("skipped", "skipped"),
    ]
    print(report.table(rows, columns))
    profiles = [dict(arm=name, **arm["profile"], **arm["profile"].get("decode_step", {}))
                for name, arm in payload["arms"].items() if "profile" in arm]
    if profiles:
        print(f"engine iterations under the profiler ({PROFILE_FRAGMENT}); decode: seconds per iteration:")
        print(report.table(profiles, [
            ("arm", "arm"), ("wall_s", "traced s"), ("busy_fraction", "GPU busy"), ("idle_s", "GPU idle s"),
            ("iterations", "decode iterations"), ("floor_s", "floor"), ("kernel_s", "kernels"), ("span_s", "span"),
            ("kernels_of_floor", "floor/kernels"), ("span_of_floor", "floor/span"), ("error", "error")]))
        for profile in (profile for profile in profiles if "error" not in profile):
            print(f"[{profile['arm']}] GPU s by kind {profile.get('kinds')}; annotations {profile.get('annotations')}")
    goal_rows = [dict(goal=name, **goal) for name, goal in payload["goals"].items()]
    print(report.table(goal_rows, [("goal", "goal"), ("value", "value"), ("target", "target"), ("held", "held")]))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-dry-run", action="store_true", help="CPU stand-in engine and a tiny shape")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {tuple(ARMS)}")
    parser.add_argument("--concurrencies", help="requests in flight per level (default 16,64,256; dry run 2,8)")
    parser.add_argument("--max-response", type=int, help="response clip (default 2048 to fit 6 minutes; dry run 32)")
    parser.add_argument("--time-budget-s", type=float, default=330, help="no new arm or level after this")
    parser.add_argument("--shape", choices=list(model_shape.SHAPES), default="qwen2.5-1.5b",
                        help="model shape on the GPU (the dry run is always tiny)")
    parser.add_argument("--grace-s", type=float, default=120, help="an arm still running this long after it is killed")
    parser.add_argument("--profile", action="store_true",
                        help=f"after the levels, replay some requests under vLLM's profiler ({PROFILE_FRAGMENT})")
    parser.add_argument("--profile-concurrency", type=int, default=64, help="requests replayed under the profiler")
    parser.add_argument("--profile-tokens", type=int, default=128, help="tokens each replayed request generates")
    # set by the parent for its arm processes
    parser.add_argument("--arm", choices=tuple(ARMS), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--model-path", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--profiler-config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.arms = [arm.strip() for arm in args.arms.split(",") if arm.strip()]
    unknown = sorted(set(args.arms) - set(ARMS))
    if unknown:
        parser.error(f"--arms: unknown {unknown}; choose from {tuple(ARMS)}")
    dry = args.cpu_dry_run
    try:
        args.concurrencies = [int(c) for c in (args.concurrencies or ("2,8" if dry else "16,64,256")).split(",")]
    except ValueError:
        parser.error(f"--concurrencies must be comma-separated integers, got {args.concurrencies!r}")
    if min(args.concurrencies) < 1:
        parser.error("--concurrencies must all be >= 1")
    args.shape = model_shape.TINY if dry else args.shape
    args.max_response = args.max_response or (32 if dry else 2048)
    args.floor_goal_min = 8 if dry else 64  # the floor goal holds from this concurrency up
    args.min_prompt, args.max_prompt, args.median = (4, 16, 12) if dry else (100, 600, lengths.RESPONSE_MEDIAN)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.arm:  # an arm process started by the parent
        from transformers import AutoConfig

        args.vocab_size = AutoConfig.from_pretrained(args.model_path).vocab_size
        with open(args.result, "w") as handle:
            json.dump(run_arm(args), handle)
        return 0
    started = time.perf_counter()
    if not args.cpu_dry_run and not torch.cuda.is_available():
        print("FAIL: no CUDA device; use --cpu-dry-run on a CPU machine", flush=True)
        return 1
    payload = report.environment(args.cpu_dry_run)
    payload["ceilings"] = ceilings.measure(cpu_dry_run=args.cpu_dry_run)
    with tempfile.TemporaryDirectory() as model_path:  # config and tokenizer only: vLLM loads dummy weights
        config = model_shape.write(args.shape, model_path, weights=False)
        payload["model"] = model_shape.summary(args.shape, config)
        payload["settings"] = {
            "concurrencies": args.concurrencies,
            "requests_per_level": {str(c): 2 * c for c in args.concurrencies},
            "max_prompt": args.max_prompt,
            "max_response": args.max_response,
            "arms": {arm: ARMS[arm] for arm in args.arms},
            "profile": {"preset": PROFILE_FRAGMENT, "concurrency": args.profile_concurrency,
                        "tokens_per_request": args.profile_tokens} if args.profile else None,
        }
        payload["lengths"] = {str(c): level_lengths(c, args).summary() for c in args.concurrencies}
        deadline = time.time() + args.time_budget_s - (time.perf_counter() - started)
        arms = run_children(args, model_path, deadline)
    payload["arms"] = arms
    payload["goals"], payload["checks"] = summarize(arms, args, config, payload["ceilings"])
    payload["wall_s"] = round(time.perf_counter() - started, 1)
    path = report.write_json("rollout", payload)
    print(f"wall {payload['wall_s']}s" + (f"; wrote {path}" if path else ""), flush=True)
    print_tables(payload)
    checks = payload["checks"]
    return 0 if not checks["arms_failed"] and checks["every_request_got_its_length"] else 1


if __name__ == "__main__":
    sys.exit(main())

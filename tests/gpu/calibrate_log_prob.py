"""Calibrate the planner's old-log-prob pass (fsdp_log_prob_pass in verl_recipes/planner/fsdp_memory.py) against
the peak of verl 0.9.1's own pass.

The actor's TrainingWorker (verl_recipes.bench.verl_actor: FSDP2 engine, no Ray, world size 1) runs infer_batch as
RayPPOTrainer._compute_old_log_prob asks it to (calculate_entropy=True, compute_loss=False) on one packed micro-batch
of exactly T tokens (use_remove_padding, dynamic batching with a log-prob budget of T; attention torch_varlen and our
chunked log-probs, as on a node without flash-attn), with entropy_from_logits_with_chunking off, then on. Per T:
torch.cuda.max_memory_allocated during the pass minus what was allocated before it, against the planner's terms
above the state: the larger of a layer's moment (gathered layers + one layer's MLP intermediates) and the logits'
(the lm_head gathered + the final hidden states + the bf16 logits + an eager entropy's buffers).

    python tests/gpu/calibrate_log_prob.py                   # one H100/H200, qwen2.5-1.5b shape, about 2 minutes
    python tests/gpu/calibrate_log_prob.py --eager           # fsdp_config.use_torch_compile=False: the entropy eager
    python tests/gpu/calibrate_log_prob.py --cpu-dry-run     # same code path on CPU (gloo), tiny model, no memory

Writes $OUT/calibrate_log_prob.json when $OUT is set; prints the comparison table last.
"""

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from verl_recipes.bench import model_shape as bench_shapes
from verl_recipes.bench import report, verl_actor
from verl_recipes.planner import fsdp_memory
from verl_recipes.planner.model_shape import model_shape
from verl_recipes.runtime import logprobs, varlen_attention

GIB = 2**30
CHUNK = 2048  # verl's entropy_from_logits_chunk_size default


def overrides(max_tokens: int, chunking: bool, eager: bool) -> list[str]:
    return [
        f"actor_rollout_ref.actor.fsdp_config.use_torch_compile={not eager}",
        "+actor_rollout_ref.model.override_config.attn_implementation=" + varlen_attention.NAME,
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.model.use_remove_padding=True",
        "actor_rollout_ref.model.use_fused_kernels=False",
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={max_tokens}",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={max_tokens}",
        f"actor_rollout_ref.actor.entropy_from_logits_with_chunking={chunking}",
        f"actor_rollout_ref.actor.entropy_from_logits_chunk_size={CHUNK}",
    ]


def log_prob_batch(tokens: int, seq_len: int, vocab_size: int):
    """tokens / seq_len sequences of seq_len tokens (an eighth prompt), as _compute_old_log_prob hands them over."""
    from verl.utils import tensordict_utils as tu

    count = tokens // seq_len
    prompt = seq_len // 8
    data = verl_actor.ppo_mini_batch(np.full(count, prompt), np.full(count, seq_len - prompt), vocab_size)
    tu.assign_non_tensor(data, calculate_entropy=True, compute_loss=False)
    return data


def planned_gib(shape, tokens: int, chunking: bool, eager: bool) -> dict:
    """The planner's pass above the state."""
    lp = fsdp_memory.fsdp_log_prob_pass(shape, 1, tokens, entropy_chunk_size=CHUNK if chunking else None,
                                        torch_compile=not eager)
    return {"layer_moment": lp.layer_moment_gib, "output_layer": lp.output_layer_gib, "hidden": lp.hidden_gib,
            "logits": lp.logits_gib, "entropy": lp.entropy_gib,
            "above_state": max(lp.layer_moment_gib, lp.logits_moment_gib)}


def measure(worker, data, on_gpu: bool) -> dict:
    if not on_gpu:
        started = time.perf_counter()
        output = worker.infer_batch(data)
        return {"seconds": time.perf_counter() - started, "entropy_shape": list(output["entropy"].values().shape)}
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        output = worker.infer_batch(data)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as err:
        return {"oom": str(err).splitlines()[0], "before_gib": before / GIB}
    peak = torch.cuda.max_memory_allocated()
    return {"seconds": time.perf_counter() - started, "before_gib": before / GIB, "peak_gib": peak / GIB,
            "above_before_gib": (peak - before) / GIB, "entropy_shape": list(output["entropy"].values().shape)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-dry-run", action="store_true")
    parser.add_argument("--shape", choices=list(bench_shapes.SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--tokens", default="8192,16384,32768,49152", help="micro-batch sizes in tokens, ascending")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--eager", action="store_true", help="fsdp_config.use_torch_compile=False (verl's default: True)")
    args = parser.parse_args(argv)
    on_gpu = not args.cpu_dry_run
    if args.cpu_dry_run:
        args.shape, args.tokens, args.seq_len = bench_shapes.TINY, "64,128", 32
    token_list = [int(t) for t in args.tokens.split(",")]
    verl_actor.init_ranks(cpu=not on_gpu, port=29533)
    payload = report.environment(args.cpu_dry_run)
    logprobs.use(True)
    with tempfile.TemporaryDirectory() as model_path:
        hf_config = bench_shapes.write(args.shape, model_path, weights=True)
        shape, vocab_size = model_shape(Path(model_path)), hf_config.vocab_size
        payload.update(eager=args.eager, shape=args.shape, hf_config=hf_config.to_dict(), seq_len=args.seq_len,
                       chunk=CHUNK, logprobs="verl_recipes.runtime.logprobs", attention=varlen_attention.NAME, rows=[])
        for chunking in (False, True):
            config = verl_actor.compose(model_path, overrides(max(token_list), chunking, args.eager))
            worker = verl_actor.build_worker(config)
            measure(worker, log_prob_batch(args.seq_len, args.seq_len, vocab_size), on_gpu)  # warm-up
            for tokens in token_list:
                row = {"chunking": chunking, "tokens": tokens, **measure(worker, log_prob_batch(tokens, args.seq_len,
                                                                                              vocab_size), on_gpu)}
                row["planned"] = planned_gib(shape, tokens, chunking, args.eager)
                if "above_before_gib" in row:
                    row["error_pct"] = 100 * (row["planned"]["above_state"] / row["above_before_gib"] - 1)
                payload["rows"].append(row)
                print(row, flush=True)
            del worker
            gc.collect()
    logprobs.use(False)
    report.write_json("calibrate_log_prob", payload)
    print("chunking  tokens  measured GiB above before  planned GiB (logits + entropy)  error %")
    for row in payload["rows"]:
        planned = row["planned"]
        measured = row.get("above_before_gib", row.get("oom", "-"))
        print(f"{row['chunking']!s:>8}  {row['tokens']:>6}  {measured!s:>26.26}  "
              f"{planned['above_state']:8.2f} ({planned['logits']:.2f} + {planned['entropy']:.2f})  "
              f"{row.get('error_pct', float('nan')):7.1f}")
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The two ceilings every benchmark is read against, measured in the benchmark's own process (METHOD.md).

* bf16 GEMM: 8192^3 matrix product on random data, TFLOP/s = 2 n^3 / median time;
* device copy: a 1 GiB buffer copied to another, GB/s counting bytes read plus bytes written.
Medians of many runs timed with CUDA events after warm-up. --cpu-dry-run times tiny sizes with a host clock.

    python -m verl_recipes.bench.ceilings               # on the GPU machine, ~10 s
    python -m verl_recipes.bench.ceilings --cpu-dry-run
"""

import argparse
import json
import statistics
import time

import torch


def _median_ms(run, device: torch.device, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        run()
    if device.type != "cuda":
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def gemm_tflops(device: torch.device, n: int, repeats: int) -> float:
    generator = torch.Generator(device).manual_seed(0)
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=generator) for _ in range(2))
    out = torch.empty_like(a)
    milliseconds = _median_ms(lambda: torch.matmul(a, b, out=out), device, repeats, warmup=5)
    if not torch.isfinite(out).all():
        raise AssertionError("verl_recipes.bench.ceilings: the GEMM produced non-finite values")
    return 2 * n**3 / (milliseconds * 1e-3) / 1e12


def copy_gbps(device: torch.device, num_bytes: int, repeats: int) -> float:
    """Bytes read plus bytes written per second."""
    generator = torch.Generator(device).manual_seed(1)
    src = torch.randn(num_bytes // 2, device=device, dtype=torch.bfloat16, generator=generator)
    dst = torch.empty_like(src)
    milliseconds = _median_ms(lambda: dst.copy_(src), device, repeats, warmup=5)
    if not torch.equal(dst, src):
        raise AssertionError("verl_recipes.bench.ceilings: the copy did not reproduce its source")
    return 2 * num_bytes / (milliseconds * 1e-3) / 1e9


def measure(cpu_dry_run: bool = False, repeats: int = 30) -> dict:
    """GEMM TFLOP/s and copy GB/s of this device; prints one line and returns them with the sizes used."""
    if not cpu_dry_run and not torch.cuda.is_available():
        raise RuntimeError("verl_recipes.bench.ceilings: no CUDA device; use --cpu-dry-run on a CPU machine")
    device = torch.device("cpu" if cpu_dry_run else "cuda")
    gemm_n = 256 if cpu_dry_run else 8192
    copy_bytes = 2**23 if cpu_dry_run else 2**30
    result = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (dry run)",
        "gemm_tflops": round(gemm_tflops(device, gemm_n, repeats), 3),
        "copy_gbps": round(copy_gbps(device, copy_bytes, repeats), 1),
        "gemm_n": gemm_n,
        "copy_bytes": copy_bytes,
        "repeats": repeats,
    }
    if device.type == "cuda":
        torch.cuda.empty_cache()
    print(
        f"ceilings on {result['device']}: bf16 GEMM {gemm_n}^3 {result['gemm_tflops']} TFLOP/s, "
        f"copy {copy_bytes >> 20} MiB {result['copy_gbps']} GB/s (read+write), median of {repeats}",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-dry-run", action="store_true", help="tiny sizes on the CPU")
    args = parser.parse_args()
    print(json.dumps(measure(cpu_dry_run=args.cpu_dry_run)))


if __name__ == "__main__":
    main()

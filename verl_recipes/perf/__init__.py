"""Performance tooling for verl 0.9.1 runs: per-stage step reports and Nsight Systems report handling.

- `python -m verl_recipes.perf.report`: per-stage time table, MFU, throughput and response-length tail
  from the JSONL written by verl's `file` logger, plus an optional PNG.
- `python -m verl_recipes.perf.collect_nsys`: gather `*.nsys-rep` worker reports and name them by
  rank, role and step.
- `python -m verl_recipes.perf.nsys_summary`: GPU-busy time per top-level NVTX range of one report.
"""

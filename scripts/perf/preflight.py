"""Before a profiling run starts: the profiler's tools are installed, its settings profile something, and
its output fits on disk. `profiling_preflight(cfg, run_dir)` returns one message per problem, each saying
what is missing and how to fix it; [] when ready or when no profiler is configured.

Disk estimates, per profiled rank and profiled step, on the disk of the node that holds the rank:
- nsys, 1 GB. One GPU of qwen25-7b-grpo runs ~40 update micro-batches of 24k tokens (forward,
  recomputed forward and backward over 28 layers) and ~40 log-prob forwards a step: about 1e5 kernels,
  each stored as a kernel and a CUDA API record beside the cuBLAS and NVTX records, so ~3e5 records at
  ~100-200 bytes, ~0.05 GB. nsys writes the raw capture first and converts it, so both exist at once;
  1 GB keeps ~10x headroom for longer sequences and larger models. The controller's whole-run report
  adds 1 GB.
  Reports are written under Ray's session folder (/tmp/ray, or $RAY_TMPDIR/ray) and then moved to
  save_path, so both must have room.
- torch, 0.5 GB: gzipped Chrome traces store ~30 bytes an event; a step records ~1e6 events on one
  rank (CPU op, launch and kernel per kernel over the log-prob stages, one update mini-batch and 64
  rollout engine iterations of the presets), ~0.05 GB, with 10x headroom for unscheduled updates.
- torch_memory: trace_alloc_max_entries x stack_depth x 100 bytes a frame per snapshot (0.3 GB at
  verl's defaults), one snapshot per memory_snapshot_num_steps profiled steps.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
from collections import Counter
from pathlib import Path

from omegaconf import DictConfig

from scripts.perf.profile_args import CAPTURE_RANGE_END, nsys_capture_ranges

GB = 1024**3
NSYS_GB_PER_RANK_STEP = 1.0
NSYS_CONTROLLER_GB = 1.0
TORCH_GB_PER_RANK_STEP = 0.5
SNAPSHOT_BYTES_PER_FRAME = 100
FIX_DISK = "free space, point global_profiler.save_path at a larger disk, or profile fewer STEPS/RANKS"


def ray_nsight_root() -> Path:
    """Where Ray writes nsys reports before verl moves them (ray/_private/runtime_env/nsight.py)."""
    return Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "ray"


def free_gb(path: Path) -> float:
    """Free space of the file system that `path` (or its nearest existing parent) is on."""
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free / GB


def _module_found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def tool_problems(tool: str) -> list[str]:
    """What the profiler needs installed on this node (the launch node stands for every node)."""
    problems = []
    if tool == "nsys":
        if shutil.which("nsys") is None:
            problems.append("nsys (Nsight Systems CLI) is not on PATH; Ray starts every profiled worker under it, on "
                            "every node: install the nsight-systems-cli package from NVIDIA's CUDA apt/yum repository "
                            "(or the installer from https://developer.nvidia.com/nsight-systems), then check "
                            "`nsys --version`")
        if not _module_found("nvtx"):
            problems.append("python package 'nvtx' is missing; verl asserts it for global_profiler.tool=nsys "
                            "(trainer/main_ppo.py run_ppo): pip install nvtx (it comes with verl[verl-core])")
    elif tool == "torch":
        import torch.profiler

        if torch.profiler.ProfilerActivity.CUDA not in torch.profiler.supported_activities():
            problems.append("this torch cannot record CUDA kernels with torch.profiler (supported activities: "
                            f"{sorted(a.name for a in torch.profiler.supported_activities())}): install a CUDA build "
                            "of torch (make setup TORCH_SPEC=...), whose CUPTI (nvidia-cuda-cupti) the profiler uses")
    elif tool == "torch_memory":
        import torch

        if not torch.cuda.is_available():
            problems.append("global_profiler.tool=torch_memory needs a CUDA device: without one verl records no "
                            "memory history and only warns (utils/memory_utils.py enable_memory_visualize); run on a "
                            "GPU node with a CUDA build of torch")
    return problems


def config_problems(cfg: DictConfig) -> list[str]:
    """Settings that would profile nothing, or lose the nsys reports."""
    profiler = cfg.global_profiler
    steps = sorted(set(profiler.steps or []))
    if not steps:
        return ["global_profiler.steps is empty, so nothing is profiled: set STEPS=[2,3] "
                "(make <recipe>-profile) or global_profiler.steps=[2,3]"]
    problems = []
    total = cfg.trainer.total_training_steps
    if total is not None and steps[-1] > total:
        problems.append(f"global_profiler.steps={steps} goes past trainer.total_training_steps={total}; "
                        f"later steps never run: raise total_training_steps to {steps[-1]} or pick earlier STEPS")
    roles = (cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.ref, cfg.critic)
    if not any(role.profiler.enable for role in roles):
        problems.append("no role is profiled: set actor_rollout_ref.actor.profiler.enable=true (the rollout follows "
                        "it; configs/profiling/common.yaml makes the reference and critic follow it too)")
    if profiler.tool == "nsys":
        nsys = profiler.global_tool_config.nsys
        ranges = nsys_capture_ranges(cfg, steps, nsys.discrete, profiler.profile_continuous_steps)
        configured = nsys.worker_nsight_options.get("capture-range-end")
        if configured != f"repeat-shutdown:{ranges}":
            problems.append(f"{CAPTURE_RANGE_END} is {configured!r}, but each profiled worker process opens {ranges} "
                            f"capture range(s) (steps {steps}, discrete={nsys.discrete}); nsys writes the reports "
                            f"while the job runs only when the count is exact (verl issue 4920): set "
                            f"{CAPTURE_RANGE_END}=repeat-shutdown:{ranges}")
    return problems


def profiled_ranks_per_node(cfg: DictConfig) -> int:
    """The most profiled training ranks one node holds (save_path is node-local)."""
    profiler, per_node = cfg.actor_rollout_ref.actor.profiler, int(cfg.trainer.n_gpus_per_node)
    if profiler.all_ranks:
        return per_node
    ranks = list(profiler.ranks or [0])  # verl profiles rank 0 when enabled with no ranks
    return max(Counter(int(rank) // per_node for rank in ranks).values())


def output_gb(cfg: DictConfig) -> float:
    """Estimated output of the run's profiler on the busiest node (see the module docstring)."""
    profiler = cfg.global_profiler
    steps, ranks = len(set(profiler.steps or [])), profiled_ranks_per_node(cfg)
    if profiler.tool == "nsys":
        return ranks * steps * NSYS_GB_PER_RANK_STEP + NSYS_CONTROLLER_GB
    if profiler.tool == "torch":
        return ranks * steps * TORCH_GB_PER_RANK_STEP
    memory = profiler.global_tool_config.torch_memory
    snapshots = ranks * math.ceil(steps / memory.memory_snapshot_num_steps)
    return snapshots * memory.trace_alloc_max_entries * memory.stack_depth * SNAPSHOT_BYTES_PER_FRAME / GB


def disk_problems(cfg: DictConfig, run_dir: Path) -> list[str]:
    save_path = Path(str(cfg.actor_rollout_ref.actor.profiler.save_path))
    places = {"global_profiler.save_path " + str(save_path): save_path if save_path.is_absolute() else run_dir / save_path}
    if cfg.global_profiler.tool == "nsys":
        places["Ray's nsight folder"] = ray_nsight_root()
    need = output_gb(cfg)
    problems = []
    for label, path in places.items():
        free = free_gb(path)
        if free < need:
            problems.append(f"{label} ({path}): about {need:.1f} GB of {cfg.global_profiler.tool} output expected "
                            f"but {free:.1f} GB free: {FIX_DISK}")
    return problems


def profiling_preflight(cfg: DictConfig, run_dir: Path) -> list[str]:
    """Every problem with the run's profiling setup. cfg: the composed, resolved config; run_dir: the folder
    verl runs in (a relative save_path lands there); it need not exist yet."""
    tool = cfg.global_profiler.tool
    if tool not in ("nsys", "torch", "torch_memory"):
        return []
    problems = tool_problems(tool) + config_problems(cfg)
    if cfg.global_profiler.steps:  # without steps there is no output to size
        problems += disk_problems(cfg, Path(run_dir))
    return problems

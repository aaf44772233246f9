"""Preflight: what the machines must have before a recipe starts. One home for every such check: the GPUs of
this node, the Python packages the config needs, the profiler's tools and disk, the GPUs of a Ray cluster, and
the plan every node of a cluster job proves before verl starts (executed there by
verl_recipes/runtime/node_check.py, which ships with the job).

Each function returns one message per problem, saying what is missing and how to fix it; [] when ready.

Profiler disk estimates, per profiled rank and profiled step, on the disk of the node that holds the rank:
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
import subprocess
from collections import Counter
from pathlib import Path

from omegaconf import DictConfig

from verl_recipes import yaml_parser
from verl_recipes.catalog import REPO, hf_config
from verl_recipes.check.keys import VERL_VERSION
from verl_recipes.check.model import without_flash_attn_loaded
from verl_recipes.compose import flatten
from verl_recipes.entrypoints import Pool
from verl_recipes.perf.profile_args import CAPTURE_RANGE_END, nsys_capture_ranges
from verl_recipes.runtime.modules import module_found

# What a cluster job ships of the repo, {repo path: path in the job's working dir}: the runtime part of the package,
# the rewards and the agents, which is all verl's workers import. rewards/ and agents/ go where their package names
# put them (pyproject's package-dir), so the job's working dir imports them without an install.
SHIPPED = {"verl_recipes/__init__.py": "verl_recipes/__init__.py", "verl_recipes/runtime": "verl_recipes/runtime",
           "rewards": "verl_recipes/rewards", "agents": "verl_recipes/agents"}

GB = 1024**3
NSYS_GB_PER_RANK_STEP = 1.0
NSYS_CONTROLLER_GB = 1.0
TORCH_GB_PER_RANK_STEP = 0.5
SNAPSHOT_BYTES_PER_FRAME = 100
FIX_DISK = "free space, point global_profiler.save_path at a larger disk, or profile fewer STEPS/RANKS"


# What verl 0.9.1's Megatron engine imports -> the pin that provides it; the two files say why these versions and how
# they install (pip install -r the first, then pip install --no-deps --no-build-isolation -r the second)
MEGATRON = "requirements/gpu-megatron.txt"
MEGATRON_NODEPS = "requirements/gpu-megatron-nodeps.txt"
MEGATRON_PACKAGES = {
    "megatron.core": f"megatron-core==0.18.2 ({MEGATRON})",
    "transformer_engine": f"transformer-engine[core-cu13]==2.20.2 ({MEGATRON})",
    "modelopt": f"nvidia-modelopt==0.44.0 ({MEGATRON})",
    "megatron.bridge": f"megatron-bridge==0.5.1 ({MEGATRON_NODEPS}: --no-deps)",
    "transformer_engine_torch": f"transformer-engine-torch==2.20.2, built for this torch ({MEGATRON_NODEPS}: "
                                f"--no-build-isolation; tests/gpu/build_transformer_engine.sh on a machine without GPU)",
}


def ray_nsight_root() -> Path:
    """Where Ray writes nsys reports before verl moves them (ray/_private/runtime_env/nsight.py)."""
    return Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "ray"


def free_gb(path: Path) -> float:
    """Free space of the file system that `path` (or its nearest existing parent) is on."""
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free / GB


# ---------------------------------------------------------------- this node's GPUs


def gpu_count() -> int:
    """NVIDIA GPUs visible here (0 when there is no driver); cheap, so it runs before anything else."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (subprocess.SubprocessError, OSError):
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = sum(line.startswith("GPU ") for line in out.splitlines())
    return min(count, len([d for d in visible.split(",") if d.strip()])) if visible else count


def gpu_problems(label: str, name: str, needed: int | None = None) -> list[str]:
    """No GPU at all, or fewer than the recipe declares for this node."""
    found = gpu_count()
    if found == 0:
        return [f"{label}: no NVIDIA GPU on this machine (nvidia-smi finds none), so nothing was launched or "
                f"downloaded. Run it on a GPU node, submit it to a Ray cluster with CLUSTER=<address>, or prove it "
                f"here with `make {name}-check` (or `make {name} DRY=1`)"]
    if needed is not None and found < needed:
        return [f"{label}: the recipe declares {needed} GPUs per node (trainer.n_gpus_per_node plus any "
                f"standalone rollout GPUs) but this node has {found}; set ARGS=\"trainer.n_gpus_per_node={found} ...\" "
                f"or use a recipe for this node size"]
    return []


# ---------------------------------------------------------------- packages


def required_packages(cfg: DictConfig) -> dict[str, str]:
    """Modules plain `pip install verl` lacks but this config needs at run time -> how to install them."""
    needs = {"ray": "verl", "transfer_queue": "verl[vllm] (TransferQueue, for trainer.use_v1)"}
    if cfg.actor_rollout_ref.rollout.name == "vllm":
        needs["vllm"] = "verl[vllm] (requirements/gpu.txt)"
    elif cfg.actor_rollout_ref.rollout.name == "sglang":
        # verl[sglang]==0.9.1 does not resolve (its transformers pin excludes the one sglang 0.5.12 pins)
        needs["sglang"] = "the pinned set in requirements/gpu-sglang.txt (two pip steps, its own environment)"
    if cfg.model_engine == "megatron":
        needs.update(MEGATRON_PACKAGES)
    elif cfg.actor_rollout_ref.model.override_config.get("attn_implementation", "flash_attention_2") == "flash_attention_2":
        # verl's FSDP models load with flash_attention_2 unless overridden, and packing uses its varlen kernels
        needs["flash_attn"] = (f"flash-attn (requirements/gpu-flash-attn.txt), or run without it: "
                               f"ARGS=\"+configs/attention={attention_fragment(cfg)}\" (a local launch adds it itself)")
    if liger_runs(cfg):
        needs["liger_kernel"] = "liger-kernel (requirements/gpu.txt; configs/kernels/liger)"
    loggers = {"wandb": "wandb (configs/logging/wandb)", "tensorboard": "tensorboard (configs/logging/tensorboard)",
               "mlflow": "mlflow (configs/logging/mlflow)"}
    for backend in cfg.trainer.logger or []:
        if backend in loggers:
            needs[backend] = loggers[backend]
    needs.update(reward_packages(cfg))
    return needs


def liger_runs(cfg: DictConfig) -> bool:
    """Whether verl applies Liger's kernels: use_liger on an FSDP engine (the Megatron engine ignores the key)."""
    return cfg.model_engine != "megatron" and bool(cfg.actor_rollout_ref.model.get("use_liger"))


def reward_packages(cfg: DictConfig) -> dict[str, str]:
    """What our math-style rewards' grader workers import. Without them every answer that is not a plain number
    fails its reward call mid-run and the sample is lost (seen on the lent GPU machine, learn run 2026-11-26)."""
    from verl_recipes.rewards import grading

    path = str(cfg.reward.custom_reward_function.get("path") or "")
    if not path.startswith("pkg://"):
        return {}
    try:
        module = importlib.import_module(path[len("pkg://"):].replace("/", "."))
    except ImportError:
        return {}  # `make check` names a reward path that does not import
    return dict(grading.WORKER_PACKAGES) if vars(module).get("grade") is grading.grade else {}


# ---------------------------------------------------------------- attention without flash-attn


def attention_fragment(cfg: DictConfig) -> str | None:
    """The configs/attention fragment that replaces flash-attn for this config; None where it asks for none."""
    model = cfg.actor_rollout_ref.model
    if cfg.model_engine == "megatron":  # verl asks TransformerEngine for its flash backend, which is flash-attn's
        return "megatron_fused" if _transformer_config(cfg).get("attention_backend") == "flash" else None
    if model.override_config.get("attn_implementation", "flash_attention_2") != "flash_attention_2":
        return None
    return "sdpa_padded" if hf_config(model.path).get("vision_config") is not None else "torch_varlen"


def _transformer_config(cfg: DictConfig) -> DictConfig:
    return cfg.actor_rollout_ref.actor.megatron.override_transformer_config


def apex_fragment(cfg: DictConfig) -> str | None:
    """configs/apex/absent for a Megatron config with gradient_accumulation_fusion on, by its own setting or by
    Megatron-Bridge's default where it sets none: Megatron-Core then needs apex's fused_weight_gradient_mlp_cuda."""
    if cfg.model_engine != "megatron" or _transformer_config(cfg).get("gradient_accumulation_fusion", True) is False:
        return None
    return "absent"


# module this machine lacks -> (configs group, the function that picks its fragment, what the package is)
FALLBACKS = {"flash_attn": ("attention", attention_fragment, "flash-attn"),
             "fused_weight_gradient_mlp_cuda": ("apex", apex_fragment, "apex's CUDA extension")}


def fallback_overrides(cfg: DictConfig, installed=module_found) -> list[tuple[str, str]]:
    """(override, what is missing) for each configs fragment that stands in for a package this machine cannot
    import: the launcher adds each and says so; `make check` proves them all (installed=lambda module: False)."""
    found = []
    for module, (group, fragment, package) in FALLBACKS.items():
        option = None if installed(module) else fragment(cfg)
        if option:
            found.append((f"+configs/{group}={option}", package))
    return found


def attention_path(cfg: DictConfig) -> str:
    """Which attention and log-prob code the actor will run, for the launch summary."""
    model = cfg.actor_rollout_ref.model
    if cfg.model_engine == "megatron":
        backend = _transformer_config(cfg).get("attention_backend")
        return f"Megatron-Core (TransformerEngine attention, backend {backend}; vocab-parallel log-probs)"
    implementation = model.override_config.get("attn_implementation", "flash_attention_2")
    packing = "packed rows" if model.use_remove_padding else "padded rows"
    attention = {"flash_attention_2": "flash-attn", "torch_varlen": "PyTorch varlen_attn (torch_varlen)",
                 "sdpa": "PyTorch SDPA"}.get(implementation, implementation)
    if model.use_fused_kernels:
        logprobs = "verl's fused kernels"
    elif implementation == "flash_attention_2" or module_found("flash_attn"):
        logprobs = "flash-attn's cross-entropy"
    else:
        logprobs = ("chunked (verl_recipes.runtime.logprobs)" if without_flash_attn_loaded(cfg)
                    else "verl's per-token fallback loop (slow)")
    return f"attention {attention} on {packing}; log-probs {logprobs}"


def missing_packages(packages: dict[str, str]) -> list[str]:
    return [f"python module '{module}' is missing: install {hint}"
            for module, hint in packages.items() if not module_found(module)]


# ---------------------------------------------------------------- a Ray cluster's GPUs


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def cluster_gpu_problems(pools: list[Pool], nodes: list[dict], address: str) -> list[str]:
    """What the cluster lacks for the recipe's pools: GPUs in total, then nodes with enough GPUs each.
    `nodes`: alive nodes as {"ip", "gpus"}."""
    declared = sum(pool.gpus for pool in pools)
    have = sum(node["gpus"] for node in nodes)
    inventory = ", ".join(f"{node['ip']}: {node['gpus']} GPUs" for node in nodes) or "no alive node"
    if have < declared:
        if len(pools) == 1:
            parts = f"{_nodes(pools[0].nnodes)} x {pools[0].gpus_per_node} GPUs"
        else:
            parts = " + ".join(f"{pool.name} {_nodes(pool.nnodes)} x {pool.gpus_per_node} GPUs" for pool in pools)
        return [f"the recipe declares {parts} = {declared} GPUs; the cluster at {address} has {have} ({inventory})"]
    problems = []
    for pool in pools:  # verl packs each node's share of a pool onto one node (STRICT_PACK)
        fitting = sum(node["gpus"] >= pool.gpus_per_node for node in nodes)
        if fitting < pool.nnodes:
            problems.append(f"the {pool.name} pool needs {_nodes(pool.nnodes)} with {pool.gpus_per_node} GPUs each; "
                            f"the cluster at {address} has {fitting} such node(s) ({inventory})")
    return problems


# ---------------------------------------------------------------- what every node of a cluster job proves


def checkout_path(job_path: Path) -> Path:
    """This checkout's file for a path relative to a cluster job's working dir (SHIPPED, in reverse)."""
    for source, shipped in SHIPPED.items():
        if job_path.is_relative_to(shipped):
            return REPO / source / job_path.relative_to(shipped)
    return REPO / job_path


def required_objects(cfg: DictConfig) -> list[str]:
    """`module:attribute` of the reward function and every tool class the config names: what workers import."""
    out = []
    reward = cfg.reward.custom_reward_function
    if reward.path and str(reward.path).startswith("pkg://"):
        module = str(reward.path).removeprefix("pkg://").replace("/", ".")
        out.append(f"{module}:{reward.name}" if reward.name else module)
    external = cfg.actor_rollout_ref.model.get("external_lib")
    if external:
        out.append(str(external))
    tool_config = cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path
    if tool_config:
        path = Path(str(tool_config))
        path = path if path.is_absolute() else checkout_path(path)  # relative: a path in a cluster job
        for tool in (yaml_parser.safe_load(path.read_text()) or {}).get("tools") or []:
            module, _, cls = str(tool["class_name"]).rpartition(".")
            out.append(f"{module}:{cls}")
    return out


def shared_paths(cfg: DictConfig, run_dir: Path) -> list[str]:
    """The run folder and every absolute path in the config that exists here: every node must see them."""
    values = []
    for leaf in flatten(cfg).values():
        values += leaf if isinstance(leaf, list) else [leaf]
    found = {v for v in values if isinstance(v, str) and os.path.isabs(v) and os.path.exists(v)}
    return [str(run_dir)] + sorted(found - {str(run_dir)})


def node_plan(recipe_label: str, cfg: DictConfig, run_dir: Path, train: bool = True,
              also_import: list[str] = ()) -> dict:
    """What verl_recipes.runtime.node_check proves on every node of a cluster job: verl's version, the objects
    workers import, the shared paths and (for a training job) the packages the config needs."""
    return {
        "recipe": recipe_label,
        "verl": VERL_VERSION,
        "objects": list(dict.fromkeys(required_objects(cfg) + list(also_import))),
        "paths": shared_paths(cfg, run_dir),
        "packages": required_packages(cfg) if train else {},
    }


# ---------------------------------------------------------------- profiling


def tool_problems(tool: str) -> list[str]:
    """What the profiler needs installed on this node (the launch node stands for every node)."""
    problems = []
    if tool == "nsys":
        if shutil.which("nsys") is None:
            problems.append("nsys (Nsight Systems CLI) is not on PATH; Ray starts every profiled worker under it, on "
                            "every node: install the nsight-systems-cli package from NVIDIA's CUDA apt/yum repository "
                            "(or the installer from https://developer.nvidia.com/nsight-systems), then check "
                            "`nsys --version`")
        if not module_found("nvtx"):
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

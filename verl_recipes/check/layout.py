"""Layout rules that Megatron-Core, verl 0.9.1 and vLLM enforce at start-up, checked up front.

Each function returns a list of messages; each message starts with the rule's name in brackets
and ends with the config keys to change.
"""

from omegaconf import DictConfig

from verl_recipes import entrypoints
from verl_recipes.planner.config import (
    FSDP,
    MEGATRON,
    OVERRIDE,
    ROLLOUT,
    get,
    megatron_parallel,
    megatron_recompute,
    world_size,
)
from verl_recipes.planner.megatron_memory import MegatronParallel, Recompute
from verl_recipes.planner.model_shape import ModelShape

WORLD = "trainer.nnodes × trainer.n_gpus_per_node"
SELECTIVE_RECOMPUTE_MODULES = {"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"}


def _divides(divisor: int, total: int) -> bool:
    return divisor > 0 and total % divisor == 0


def megatron_layout_errors(shape: ModelShape, parallel: MegatronParallel, recompute: Recompute) -> list[str]:
    errors = []
    tp, pp, cp, etp = parallel.tp, parallel.pp, parallel.cp, parallel.expert_tp
    if not _divides(tp * pp * cp, parallel.world_size):
        errors.append(
            f"[TP×PP×CP divides the world size] {tp}×{pp}×{cp} = {tp * pp * cp} does not divide "
            f"{parallel.world_size} GPUs; change {MEGATRON}.{{tensor,pipeline,context}}_model_parallel_size or {WORLD}"
        )
    if not _divides(tp, shape.num_attention_heads):
        errors.append(
            f"[attention heads divide by TP] {shape.num_attention_heads} heads, TP {tp}; "
            f"change {MEGATRON}.tensor_model_parallel_size"
        )
    if not _divides(tp, shape.num_kv_heads):  # Megatron: divide(num_query_groups, tp), no KV replication
        errors.append(
            f"[KV heads divide by TP] {shape.num_kv_heads} KV heads, TP {tp} (Megatron does not replicate KV heads); "
            f"change {MEGATRON}.tensor_model_parallel_size"
        )
    ffn_sizes = {"intermediate_size": (shape.ffn_hidden_size, tp)}
    if shape.is_moe:
        ffn_sizes = {
            "moe_intermediate_size": (shape.moe_ffn_hidden_size, etp),
            "shared_expert_intermediate_size": (shape.shared_expert_ffn_hidden_size, tp),
        }
    for name, (size, split) in ffn_sizes.items():
        if not _divides(split, size):
            errors.append(
                f"[FFN size divides by its TP] {name} {size} over {split}; "
                f"change {MEGATRON}.tensor_model_parallel_size / expert_tensor_parallel_size"
            )
    if parallel.vpp and pp == 1:
        errors.append(
            f"[virtual pipeline needs PP > 1] VPP {parallel.vpp} with PP 1; "
            f"unset {MEGATRON}.virtual_pipeline_model_parallel_size or raise pipeline_model_parallel_size"
        )
    errors += pipeline_split_errors(shape.num_layers, parallel)
    errors += expert_layout_errors(shape, parallel)
    errors += recompute_errors(recompute)
    return errors


def pipeline_split_errors(num_layers: int, parallel: MegatronParallel) -> list[str]:
    """Megatron TransformerConfig: layers divide by PP×VPP, or by the middle stages × VPP when first/last are set."""
    pp, vpp = parallel.pp, parallel.vpp or 1
    first, last = parallel.num_layers_in_first_pipeline_stage, parallel.num_layers_in_last_pipeline_stage
    keys = f"{MEGATRON}.pipeline_model_parallel_size / virtual_pipeline_model_parallel_size"
    uneven_keys = f"+{OVERRIDE}.num_layers_in_{{first,last}}_pipeline_stage"
    if first is None and last is None:
        if not _divides(pp * vpp, num_layers):
            return [
                f"[layers divide by PP×VPP] {num_layers} layers over PP {pp} × VPP {vpp}; "
                f"change {keys} or set {uneven_keys}"
            ]
        return []
    errors = []
    for name, count in (("first", first), ("last", last)):
        if count is not None and (count <= 0 or count % vpp):
            errors.append(
                f"[{name}-stage layers are positive and divide by VPP] {count} layers, VPP {vpp}; "
                f"change {OVERRIDE}.num_layers_in_{name}_pipeline_stage"
            )
    middle_stages = pp - (first is not None) - (last is not None)
    middle_layers = num_layers - (first or 0) - (last or 0)
    if bool(middle_stages) != bool(middle_layers) or middle_layers < 0:
        errors.append(
            f"[remaining layers fill the middle stages] {middle_layers} layers left for {middle_stages} middle stages; "
            f"change {uneven_keys} or {keys}"
        )
    elif middle_stages and not _divides(middle_stages * vpp, middle_layers):
        errors.append(
            f"[remaining layers divide by middle stages × VPP] {middle_layers} layers over {middle_stages} stages × "
            f"VPP {vpp}; change {uneven_keys} or {keys}"
        )
    return errors


def expert_layout_errors(shape: ModelShape, parallel: MegatronParallel) -> list[str]:
    ep, etp, pp = parallel.ep, parallel.expert_tp, parallel.pp
    keys = f"{MEGATRON}.expert_model_parallel_size / expert_tensor_parallel_size"
    if not shape.is_moe:
        if ep > 1:
            return [
                f"[expert parallelism needs an MoE model] EP {ep} on a dense model; "
                f"set {MEGATRON}.expert_model_parallel_size=1"
            ]
        return []
    errors = []
    if not _divides(ep, shape.num_experts):
        errors.append(f"[EP divides the number of experts] {shape.num_experts} experts, EP {ep}; change {keys}")
    if not _divides(etp * ep * pp, parallel.world_size):
        errors.append(
            f"[ETP×EP×PP divides the world size] {etp}×{ep}×{pp} = {etp * ep * pp} does not divide "
            f"{parallel.world_size} GPUs (an unset expert_tensor_parallel_size means ETP = TP = {parallel.tp}); "
            f"change {keys} or {MEGATRON}.pipeline_model_parallel_size"
        )
    if parallel.tp > 1 and ep > 1 and not parallel.sp:
        errors.append(
            f"[EP with TP needs sequence parallelism] TP {parallel.tp}, EP {ep}; set {MEGATRON}.sequence_parallel=True"
        )
    return errors


def recompute_errors(recompute: Recompute) -> list[str]:
    if recompute.granularity not in (None, "selective", "full"):
        return [
            f"[recompute granularity is selective or full] got {recompute.granularity!r}; "
            f"change {OVERRIDE}.recompute_granularity"
        ]
    if recompute.granularity == "full":
        if recompute.method not in ("uniform", "block") or not recompute.num_layers or recompute.num_layers < 1:
            return [
                f"[full recompute needs a method and a layer count] method {recompute.method!r}, "
                f"num_layers {recompute.num_layers!r}; set {OVERRIDE}.recompute_method=uniform|block and "
                f"recompute_num_layers>=1"
            ]
    if recompute.granularity == "selective":
        unknown = set(recompute.modules) - SELECTIVE_RECOMPUTE_MODULES
        if unknown:
            return [
                f"[selective recompute modules are known to Megatron] unknown {sorted(unknown)}; "
                f"change {OVERRIDE}.recompute_modules (known: {sorted(SELECTIVE_RECOMPUTE_MODULES)})"
            ]
    return []


def fsdp_layout_errors(shape: ModelShape, world_size: int, fsdp_size: int, ulysses_size: int) -> list[str]:
    """verl create_device_mesh and the Ulysses head checks (models/transformers/monkey_patch.py)."""
    errors = []
    if 0 < fsdp_size < world_size and world_size % fsdp_size:
        errors.append(
            f"[FSDP size divides the world size] fsdp_size {fsdp_size}, {world_size} GPUs; "
            f"change {FSDP}.fsdp_size (-1 shards over all GPUs) or {WORLD}"
        )
    if not _divides(ulysses_size, world_size):
        errors.append(
            f"[Ulysses SP divides the world size] SP {ulysses_size}, {world_size} GPUs; "
            f"change {FSDP}.ulysses_sequence_parallel_size"
        )
    if not _divides(ulysses_size, shape.num_attention_heads):
        errors.append(
            f"[attention heads divide by Ulysses SP] {shape.num_attention_heads} heads, SP {ulysses_size}; "
            f"change {FSDP}.ulysses_sequence_parallel_size"
        )
    if not (_divides(ulysses_size, shape.num_kv_heads) or _divides(shape.num_kv_heads, ulysses_size)):
        errors.append(
            f"[KV heads and Ulysses SP divide one another] {shape.num_kv_heads} KV heads, SP {ulysses_size}; "
            f"change {FSDP}.ulysses_sequence_parallel_size"
        )
    return errors


def rollout_layout_errors(
    shape: ModelShape, gpus: int, gpus_per_node: int, tp: int, dp: int, ep: int, pp: int, prefix: str = ROLLOUT
) -> list[str]:
    """verl RolloutConfig / RolloutReplica / vLLM server checks and vLLM's head split; `prefix` is the rollout
    config the sizes come from (the actor's, or a reward model's)."""
    errors = []
    replica = tp * dp * pp
    if pp > 1:
        errors.append(
            f"[vLLM rollout has no pipeline parallelism in verl 0.9.1] set {prefix}.pipeline_model_parallel_size=1"
        )
    if not _divides(replica, gpus):
        errors.append(
            f"[rollout TP×DP×PP tiles the GPUs] replica {tp}×{dp}×{pp} = {replica} does not divide {gpus} GPUs; "
            f"change {prefix}.tensor_model_parallel_size / data_parallel_size"
        )
    if replica > gpus_per_node and replica % gpus_per_node:
        errors.append(
            f"[a multi-node rollout replica spans whole nodes] replica {replica} GPUs, {gpus_per_node} per node; "
            f"change {prefix}.tensor_model_parallel_size / data_parallel_size"
        )
    if dp > 1 and not _divides(tp, gpus_per_node):
        errors.append(
            f"[rollout TP divides GPUs per node when DP > 1] TP {tp}, {gpus_per_node} GPUs per node; "
            f"change {prefix}.tensor_model_parallel_size"
        )
    if ep > 1 and ep != tp * dp:
        errors.append(
            f"[rollout EP equals TP×DP] EP {ep}, TP×DP = {tp * dp}; change {prefix}.expert_parallel_size"
        )
    if not _divides(tp, shape.num_attention_heads):
        errors.append(
            f"[attention heads divide by rollout TP] {shape.num_attention_heads} heads, TP {tp}; "
            f"change {prefix}.tensor_model_parallel_size"
        )
    if not (_divides(tp, shape.num_kv_heads) or _divides(shape.num_kv_heads, tp)):
        errors.append(
            f"[KV heads and rollout TP divide one another] {shape.num_kv_heads} KV heads, TP {tp}; "
            f"change {prefix}.tensor_model_parallel_size"
        )
    return errors


def layout_errors(cfg: DictConfig, shape: ModelShape, entry: entrypoints.EntryPoint = entrypoints.MAIN_PPO) -> list[str]:
    """Every layout rule for the trainer's engine and the rollout, on the GPUs the config declares for each."""
    world = world_size(cfg)
    if cfg.model_engine == "megatron":
        errors = megatron_layout_errors(shape, megatron_parallel(cfg, world), megatron_recompute(cfg))
    else:
        errors = fsdp_layout_errors(shape, world, get(cfg, f"{FSDP}.fsdp_size", -1),
                                    get(cfg, f"{FSDP}.ulysses_sequence_parallel_size", 1))
    pools = entrypoints.gpu_pools(cfg, entry)
    rollout = next((p for p in pools if p.name == "standalone rollout" and p.gpus), pools[0])
    errors += pool_rollout_errors(cfg, shape, rollout, ROLLOUT)
    return errors + reward_model_layout_errors(cfg, pools)


def pool_rollout_errors(cfg: DictConfig, shape: ModelShape, pool: entrypoints.Pool, prefix: str) -> list[str]:
    """rollout_layout_errors for the rollout config at `prefix`, serving `shape` on `pool`."""
    return rollout_layout_errors(
        shape,
        gpus=pool.gpus,
        gpus_per_node=pool.gpus_per_node,
        tp=get(cfg, f"{prefix}.tensor_model_parallel_size", 1),
        dp=get(cfg, f"{prefix}.data_parallel_size", 1),
        ep=get(cfg, f"{prefix}.expert_parallel_size", 1),
        pp=get(cfg, f"{prefix}.pipeline_model_parallel_size", 1),
        prefix=prefix,
    )


def reward_model_layout_errors(cfg: DictConfig, pools: list[entrypoints.Pool]) -> list[str]:
    """A reward model that verl serves with its own vLLM replicas (experimental/reward_loop/reward_model.py) meets
    the same rollout rules on its own pool and with its own model's heads."""
    from verl_recipes.catalog import hf_config
    from verl_recipes.planner.model_shape import model_shape

    reward_model = cfg.reward.reward_model
    pool = next((p for p in pools if p.name == "reward model"), None)
    model = hf_config(str(reward_model.model_path)) if reward_model.enable and reward_model.model_path else {}
    if pool is None or not model:
        return []
    errors = pool_rollout_errors(cfg, model_shape(model), pool, "reward.reward_model.rollout")
    return [f"{e} (the reward model's rollout)" for e in errors]

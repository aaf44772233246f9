"""Read the planner's inputs from a composed, resolved verl 0.9.1 config."""

from omegaconf import DictConfig, OmegaConf

from verl_recipes.planner.megatron_memory import MegatronParallel, Recompute

MEGATRON = "actor_rollout_ref.actor.megatron"
OVERRIDE = f"{MEGATRON}.override_transformer_config"
FSDP = "actor_rollout_ref.actor.fsdp_config"
ROLLOUT = "actor_rollout_ref.rollout"


def get(cfg: DictConfig, key: str, default=None):
    value = OmegaConf.select(cfg, key, default=None)
    return default if value is None else value


def require(cfg: DictConfig, key: str):
    value = OmegaConf.select(cfg, key, default=None)
    if value is None:
        raise ValueError(f"config lacks {key}; pass a composed, resolved verl 0.9.1 config")
    return value


def world_size(cfg: DictConfig) -> int:
    return require(cfg, "trainer.nnodes") * require(cfg, "trainer.n_gpus_per_node")


def megatron_parallel(cfg: DictConfig, world_size: int) -> MegatronParallel:
    return MegatronParallel(
        world_size=world_size,
        tp=get(cfg, f"{MEGATRON}.tensor_model_parallel_size", 1),
        pp=get(cfg, f"{MEGATRON}.pipeline_model_parallel_size", 1),
        cp=get(cfg, f"{MEGATRON}.context_parallel_size", 1),
        ep=get(cfg, f"{MEGATRON}.expert_model_parallel_size", 1),
        etp=get(cfg, f"{MEGATRON}.expert_tensor_parallel_size"),
        vpp=get(cfg, f"{MEGATRON}.virtual_pipeline_model_parallel_size"),
        sequence_parallel=get(cfg, f"{MEGATRON}.sequence_parallel", True),
        num_layers_in_first_pipeline_stage=get(cfg, f"{OVERRIDE}.num_layers_in_first_pipeline_stage"),
        num_layers_in_last_pipeline_stage=get(cfg, f"{OVERRIDE}.num_layers_in_last_pipeline_stage"),
    )


def megatron_recompute(cfg: DictConfig) -> Recompute:
    return Recompute(
        granularity=get(cfg, f"{OVERRIDE}.recompute_granularity"),
        method=get(cfg, f"{OVERRIDE}.recompute_method"),
        num_layers=get(cfg, f"{OVERRIDE}.recompute_num_layers"),
        modules=tuple(get(cfg, f"{OVERRIDE}.recompute_modules", ["core_attn"])),
    )

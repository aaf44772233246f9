"""verl 0.9.1's actor, driven in this process without Ray: one harness for bench, calibration and GPU checks.

Composes verl's own ppo_trainer.yaml with Hydra, builds the actor's TrainingWorker exactly as
ActorRolloutRefWorker.init_model does (same engine-config assignments, same ppo_loss), and feeds it a PPO
mini-batch converted the way RayPPOTrainer._update_actor converts it. So batching, packing, micro-batch
splitting, the FSDP2 engine, the loss, the optimizer and verl's own MFU metric are verl's code, not ours.
"""

import os
from functools import partial

import numpy as np
import torch

from verl_recipes.verl_cpu import use_cpu_platform


def init_ranks(cpu: bool, port: int = 29531) -> tuple[int, int]:
    """This process's rank in torchrun's world (RANK, WORLD_SIZE, LOCAL_RANK set by torchrun, one host), else a
    world of one rank, as a Ray worker of a one-GPU run sees it. Returns (rank, world size)."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:  # not under torchrun
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", str(port)))
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if cpu:
        use_cpu_platform()
    else:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if not torch.distributed.is_initialized():  # CPU tensors go over gloo on the GPU too (our counters)
        backend = "gloo" if cpu else "cpu:gloo,cuda:nccl"
        torch.distributed.init_process_group(backend, rank=rank, world_size=world_size)
    return rank, world_size


def compose(model_path: str, overrides: list[str], fragments: tuple[str, ...] = ()):
    """actor_rollout_ref of verl's ppo_trainer.yaml with our overrides (Hydra syntax, as a recipe would pass) and
    our config fragments (e.g. "configs/profiling/torch_rollout"), added the way a recipe's command line adds them."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from verl_recipes.catalog import root

    base = [
        f"hydra.searchpath=[file://{root()}]",  # where configs/ lives, for the fragments
        *(f"+{os.path.dirname(fragment)}={os.path.basename(fragment)}" for fragment in fragments),
        f"actor_rollout_ref.model.path={model_path}",
        "+actor_rollout_ref.model.load_tokenizer=False",
        "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.actor.use_kl_loss=False",
    ]
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer/config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose("ppo_trainer", overrides=base + overrides).actor_rollout_ref


def build_worker(actor_rollout_ref):
    """The actor TrainingWorker, with the engine-config assignments of ActorRolloutRefWorker.init_model; its
    profiler is the actor's (enabled only by a profiling fragment), built as init_model builds it."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import TrainingWorkerConfig
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.losses import ppo_loss

    model_config = omega_conf_to_dataclass(actor_rollout_ref.model)
    actor_config = omega_conf_to_dataclass(actor_rollout_ref.actor)
    actor_config.model_config = model_config
    training_config = TrainingWorkerConfig(
        model_type="language_model",
        model_config=actor_config.model_config,
        engine_config=actor_config.engine,
        optimizer_config=actor_config.optim,
        checkpoint_config=actor_config.checkpoint,
        profiler_config=omega_conf_to_dataclass(actor_rollout_ref.actor.profiler),
    )
    engine_config = training_config.engine_config
    engine_config.use_dynamic_bsz = actor_rollout_ref.actor.use_dynamic_bsz
    engine_config.max_token_len_per_gpu = actor_rollout_ref.actor.ppo_max_token_len_per_gpu
    engine_config.micro_batch_size_per_gpu = actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
    engine_config.infer_max_token_len_per_gpu = actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu
    engine_config.infer_micro_batch_size_per_gpu = actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu
    engine_config.use_remove_padding = model_config.get("use_remove_padding", False)
    worker = TrainingWorker(config=training_config)
    worker.reset()
    worker.set_loss_fn(partial(ppo_loss, config=actor_config))
    return worker


def build_actor_engine(actor_rollout_ref):
    """The bare engine (no TrainingWorker): what ActorRolloutRefWorker.init_model and TrainingWorker.__init__
    do for the actor, minus Ray. For checks that call engine.train_batch with their own loss."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine import EngineRegistry

    model_config = omega_conf_to_dataclass(actor_rollout_ref.model)  # imports external_lib
    actor_config = omega_conf_to_dataclass(actor_rollout_ref.actor)
    actor_config.model_config = model_config
    engine_config = actor_config.engine
    engine_config.use_dynamic_bsz = False
    engine_config.micro_batch_size_per_gpu = actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
    engine_config.infer_micro_batch_size_per_gpu = actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu
    engine_config.use_remove_padding = model_config.use_remove_padding
    engine_config.use_fused_kernels = model_config.use_fused_kernels
    model_config.model_type = "language_model"
    engine = EngineRegistry.new(
        model_type="language_model",
        backend=engine_config.strategy,
        model_config=model_config,
        engine_config=engine_config,
        optimizer_config=actor_config.optim,
        checkpoint_config=actor_config.checkpoint,
    )
    engine.initialize()
    return engine, actor_config


def ppo_mini_batch(prompt_lens: np.ndarray, response_lens: np.ndarray, vocab_size: int, seed: int = 0,
                   rank: int = 0, world_size: int = 1):
    """One GRPO mini-batch as the trainer hands it to update_actor: prompts left-padded to the longest prompt,
    responses right-padded to the longest response, then verl's left_right_2_no_padding (nested tensors).
    With several ranks every rank builds the whole mini-batch (same seed), reorders it with the trainer's
    balance_batch (verl's default) and keeps its share, split as verl's dispatch splits it over data-parallel ranks."""
    from verl import DataProto
    from verl.protocol import BatchData
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    generator = torch.Generator().manual_seed(seed)
    prompt_lens, response_lens = torch.as_tensor(prompt_lens), torch.as_tensor(response_lens)
    batch, max_prompt, max_response = len(prompt_lens), int(prompt_lens.max()), int(response_lens.max())
    columns = torch.arange(max_prompt + max_response)
    attention_mask = (columns >= max_prompt - prompt_lens[:, None]) & (columns < max_prompt + response_lens[:, None])
    attention_mask = attention_mask.long()
    response_mask = attention_mask[:, max_prompt:]
    input_ids = torch.randint(3, vocab_size, (batch, max_prompt + max_response), generator=generator) * attention_mask
    advantages = torch.randn(batch, 1, generator=generator) * response_mask  # GRPO: one advantage per sequence
    data = DataProto.from_dict(
        tensors={
            "prompts": input_ids[:, :max_prompt],
            "responses": input_ids[:, max_prompt:],
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
            "response_mask": response_mask,
            "old_log_probs": -torch.rand(batch, max_response, generator=generator) * response_mask,
            "advantages": advantages,
        },
        meta_info={"temperature": 1.0},
    )
    if world_size > 1:
        balance_batch(data, world_size)
    data = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(
        data,
        calculate_entropy=False,
        global_batch_size=batch,
        mini_batch_size=batch,
        epochs=1,
        seed=42,
        dataloader_kwargs={"shuffle": False},
        compute_loss=True,
    )
    if world_size == 1:
        return data
    # the dispatch's chunks are consolidated, hence locked; Ray's pickling hands the worker an unlocked copy
    return BatchData(data).chunk(world_size)[rank].unlock_()


def balance_batch(data, world_size: int) -> None:
    """RayPPOTrainer._balance_batch itself (trainer.balance_batch, on by default), on a stand-in trainer that
    knows only the data-parallel size: reorders data so that each rank's contiguous share has similar work."""
    from types import SimpleNamespace

    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = SimpleNamespace(actor_rollout_wg=None, _get_dp_size=lambda worker_group, role: world_size)
    RayPPOTrainer._balance_batch(trainer, data, metrics={})

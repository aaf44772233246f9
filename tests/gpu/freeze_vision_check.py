"""Check on one GPU that verl_recipes.runtime.freeze_vision really freezes the vision tower inside verl 0.9.1's FSDP engine.

It follows ActorRolloutRefWorker.init_model and update_actor without Ray: compose verl's ppo_trainer.yaml
with the keys a recipe sets, build HFModelConfig from it (which imports the hook through
`actor_rollout_ref.model.external_lib`), build the actor engine with EngineRegistry.new, initialize it, and
run engine.train_batch with verl's ppo_loss on a padded PPO batch with images, converted like
RayPPOTrainer._update_actor does. The model is a random-init Qwen2.5-VL (or Qwen3-VL, Qwen3-VL-MoE) saved to a temp dir
(verl_recipes/random_models.py).

Runs: fsdp2 with the hook, fsdp2 without it (memory and time baseline; the vision tower must move there,
which proves the check can fail), FSDP1 with use_orig_params=False, which the hook must refuse with a clear
error, and (GPU only) FSDP1 with use_orig_params=True and the hook.

    python tests/gpu/freeze_vision_check.py                  # on the GPU machine, < 3 minutes
    python tests/gpu/freeze_vision_check.py --cpu-dry-run    # same code path on CPU (gloo), tiny model

Prints PASS/FAIL per run and overall, exits 1 on FAIL, and writes $OUT/freeze_vision.json when $OUT is set.
"""

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

from verl_recipes.bench.verl_actor import build_actor_engine
from verl_recipes.verl_cpu import use_cpu_platform

HOOK_MODULE = "verl_recipes.runtime.freeze_vision"
# tiny: the smokes' tiny model of the family, seconds on CPU. medium: the real vision tower of the family's smallest
# hub model (Qwen2.5-VL-3B's: 0.67B params) under 2 text layers, so that its grads and AdamW state show up in peak
# memory and step time on a GPU.
MEDIUM = {"qwen2_5_vl": "Qwen/Qwen2.5-VL-3B-Instruct", "qwen3_vl": "Qwen/Qwen3-VL-2B-Instruct",
          "qwen3_vl_moe": "Qwen/Qwen3-VL-30B-A3B-Instruct"}
SIZES = ("tiny", "medium")
IMAGE_GRID_THW = (1, 8, 8)  # 64 patches -> 16 image tokens after the 2x2 merge


def save_random_model(model_type: str, size: str, path: str):
    """The random-init model (verl_recipes/random_models.py) in `path`; returns its config."""
    from transformers import AutoConfig

    from verl_recipes import random_models
    from verl_recipes.smoke.tiny import MODELS

    if size == "tiny":
        MODELS[model_type](Path(path))
    else:
        random_models.build(Path(path), MEDIUM[model_type], layers=2)
    return AutoConfig.from_pretrained(path)


def image_inputs(config, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One image as the processor hands it to the model: its tokens (vision start, one image token per merged patch,
    vision end) and its patches."""
    vision = config.vision_config
    t, h, w = IMAGE_GRID_THW
    image_tokens = t * h * w // vision.spatial_merge_size**2
    tokens = [config.vision_start_token_id] + [config.image_token_id] * image_tokens + [config.vision_end_token_id]
    patches = torch.randn(t * h * w, 3 * vision.temporal_patch_size * vision.patch_size**2, generator=generator)
    return torch.tensor(tokens), patches


def text_ids(config, count: int, generator: torch.Generator) -> torch.Tensor:
    """Random text tokens, above the vision tokens (the model finds an image by them)."""
    first = max(config.image_token_id, config.video_token_id, config.vision_start_token_id,
                config.vision_end_token_id) + 1
    return torch.randint(first, config.text_config.vocab_size, (count,), generator=generator)


def compose_actor_config(model_path: str, strategy: str, use_orig_params: bool, freeze: bool):
    import verl
    from hydra import compose, initialize_config_dir

    overrides = [
        f"actor_rollout_ref.model.path={model_path}",
        "+actor_rollout_ref.model.load_tokenizer=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # no flash-attn on the check machine
        "actor_rollout_ref.model.use_remove_padding=False",  # remove-padding needs flash-attn varlen
        f"actor_rollout_ref.actor.strategy={strategy}",
        f"actor_rollout_ref.actor.fsdp_config.use_orig_params={use_orig_params}",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.optim.weight_decay=0.1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.n=1",
    ]
    if freeze:
        overrides.append(f"actor_rollout_ref.model.external_lib={HOOK_MODULE}")
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer/config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=overrides).actor_rollout_ref


def ppo_batch(batch_size: int, config):
    """A padded PPO batch with one image per prompt for the model of `config`, converted the way
    RayPPOTrainer._update_actor does."""
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    generator = torch.Generator().manual_seed(1)
    response_len = 8
    prompts, attention, responses, response_mask, mm_inputs = [], [], [], [], []
    for index in range(batch_size):
        image, patches = image_inputs(config, generator)
        prompt_len = len(image) + 6
        left_pad, right_pad = index % 3, (index * 2) % 5
        text = text_ids(config, prompt_len - len(image) - left_pad, generator)
        prompts.append(torch.cat([torch.zeros(left_pad, dtype=torch.long), image, text]))
        response = text_ids(config, response_len, generator)
        response[response_len - right_pad :] = 0
        responses.append(response)
        mask = torch.ones(response_len, dtype=torch.long)
        mask[response_len - right_pad :] = 0
        response_mask.append(mask)
        attention.append(torch.cat([(torch.arange(prompt_len) >= left_pad).long(), mask]))
        mm_inputs.append({"pixel_values": patches, "image_grid_thw": torch.tensor([IMAGE_GRID_THW])})
    prompts, responses = torch.stack(prompts), torch.stack(responses)
    attention_mask, response_mask = torch.stack(attention), torch.stack(response_mask)
    text_positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    # (bsz, 4, seq): text positions then the three M-RoPE axes; exact image positions do not matter here
    position_ids = text_positions.unsqueeze(1).expand(-1, 4, -1).contiguous()
    batch = DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "response_mask": response_mask,
            "old_log_probs": -torch.rand(batch_size, response_len, generator=generator),
            "advantages": torch.randn(batch_size, response_len, generator=generator),
        },
        non_tensors={"multi_modal_inputs": np.array(mm_inputs, dtype=object)},
        meta_info={"temperature": 1.0},
    )
    data = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(
        data,
        calculate_entropy=False,
        global_batch_size=batch_size,
        compute_loss=True,
        use_remove_padding=False,
        use_dynamic_bsz=False,
        micro_batch_size_per_gpu=2,
        use_fused_kernels=False,
    )
    return data


def plain_named_parameters(module):
    """named_parameters without the `_fsdp_wrapped_module.` parts FSDP1 adds."""
    for name, param in module.named_parameters():
        yield name.replace("_fsdp_wrapped_module.", ""), param


def full_parameters(module) -> dict[str, torch.Tensor]:
    from torch.distributed.tensor import DTensor

    return {
        name: (param.full_tensor() if isinstance(param, DTensor) else param).detach().cpu().clone()
        for name, param in plain_named_parameters(module)
    }


def is_vision(name: str) -> bool:
    """Oracle independent of the hook: HF Qwen-VL keeps the tower under `model.visual`."""
    return ".visual." in f".{name}"


def run_case(args, model_path: str, config, strategy: str, use_orig_params: bool, freeze: bool) -> dict:
    from verl.workers.utils.losses import ppo_loss

    label = f"{strategy}{'' if strategy == 'fsdp2' else f'(use_orig_params={use_orig_params})'} freeze={freeze}"
    result = {"case": label, "strategy": strategy, "use_orig_params": use_orig_params, "freeze": freeze}
    on_gpu = torch.cuda.is_available() and not args.cpu_dry_run
    hook_was_loaded = HOOK_MODULE in sys.modules
    actor_rollout_ref = compose_actor_config(model_path, strategy, use_orig_params, freeze)
    if on_gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    engine, actor_config = build_actor_engine(actor_rollout_ref)
    if freeze and not hook_was_loaded:
        result["hook_imported_by_verl_external_lib"] = HOOK_MODULE in sys.modules
    before = full_parameters(engine.module)
    loss_fn = partial(ppo_loss, config=actor_config)  # as ActorRolloutRefWorker.init_model sets it
    step_times = []
    with engine.train_mode():
        for _ in range(args.steps):
            data = ppo_batch(4, config)
            if on_gpu:
                torch.cuda.synchronize()
            start = time.perf_counter()
            output = engine.train_batch(data, loss_function=loss_fn)
            if on_gpu:
                torch.cuda.synchronize()
            step_times.append(time.perf_counter() - start)
        grads_none = {name: param.grad is None for name, param in plain_named_parameters(engine.module)}
        vision_in_optimizer_state = sum(
            param in engine.optimizer.state for name, param in plain_named_parameters(engine.module) if is_vision(name)
        )
    after = full_parameters(engine.module)
    vision = [name for name in before if is_vision(name)]
    language = [name for name in before if not is_vision(name)]
    result.update(
        vision_tensors=len(vision),
        vision_params=sum(before[name].numel() for name in vision),
        language_params=sum(before[name].numel() for name in language),
        vision_unchanged=sum(torch.equal(before[name], after[name]) for name in vision),
        language_changed=sum(not torch.equal(before[name], after[name]) for name in language),
        language_tensors=len(language),
        vision_grads_none=sum(grads_none[name] for name in vision),
        vision_in_optimizer_state=vision_in_optimizer_state,
        grad_norm=float(output["metrics"]["grad_norm"]),
        step_time_s=(sum(step_times[1:]) / max(1, len(step_times) - 1)),
        peak_memory_gib=(torch.cuda.max_memory_allocated() / 2**30) if on_gpu else None,
    )
    if freeze:
        passed = (
            result["vision_unchanged"] == len(vision) > 0
            and result["language_changed"] == len(language)
            and result["vision_grads_none"] == len(vision)
            and vision_in_optimizer_state == 0
            and result.get("hook_imported_by_verl_external_lib", True)
        )
    else:  # baseline: the same check must see the tower move, or it proves nothing
        passed = result["vision_unchanged"] == 0 and result["language_changed"] == len(language)
    result["passed"] = bool(passed)
    del engine
    gc.collect()
    if on_gpu:
        torch.cuda.empty_cache()
    return result


def run_refusal_case(model_path: str) -> dict:
    """FSDP1 without use_orig_params cannot mix frozen and trainable params; the hook must say so."""
    result = {"case": "fsdp(use_orig_params=False) freeze=True must refuse"}
    try:
        build_actor_engine(compose_actor_config(model_path, "fsdp", use_orig_params=False, freeze=True))
        result.update(passed=False, error=None)
    except Exception as error:  # noqa: BLE001 - the type is checked below by name
        message = f"{type(error).__name__}: {error}"
        result.update(passed=type(error).__name__ == "VisionFreezeError" and "use_orig_params" in message)
        result["error"] = message
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-dry-run", action="store_true", help="run the same path on CPU with a tiny model")
    parser.add_argument("--model", default="qwen2_5_vl", choices=["qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"])
    parser.add_argument("--size", choices=SIZES, help="default: medium on GPU, tiny with --cpu-dry-run")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per case (first one is warm-up)")
    args = parser.parse_args()
    args.size = args.size or ("tiny" if args.cpu_dry_run else "medium")

    if args.cpu_dry_run:
        use_cpu_platform()
    elif not torch.cuda.is_available():
        print("FAIL: no GPU; use --cpu-dry-run on a CPU machine", flush=True)
        return 1
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29517"))
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if not args.cpu_dry_run:
        torch.cuda.set_device(0)
    torch.distributed.init_process_group("gloo" if args.cpu_dry_run else "cpu:gloo,cuda:nccl", rank=0, world_size=1)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as model_path:
        config = save_random_model(args.model, args.size, model_path)
        results = [
            run_case(args, model_path, config, "fsdp2", use_orig_params=False, freeze=True),
            run_case(args, model_path, config, "fsdp2", use_orig_params=False, freeze=False),
            run_refusal_case(model_path),
        ]
        if not args.cpu_dry_run:  # verl builds FSDP1 with sync_module_states=True, which torch allows on GPU only
            results.append(run_case(args, model_path, config, "fsdp", use_orig_params=True, freeze=True))
    passed = all(result["passed"] for result in results)
    summary = {
        "passed": passed,
        "model": args.model,
        "size": args.size,
        "device": "cpu (dry run)" if args.cpu_dry_run else torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "wall_s": round(time.perf_counter() - started, 1),
        "results": results,
    }
    for result in results:
        print(f"{'PASS' if result['passed'] else 'FAIL'}  {json.dumps(result)}", flush=True)
    frozen, baseline = results[0], results[1]
    if baseline.get("peak_memory_gib") is not None:
        print(
            f"peak memory {frozen['peak_memory_gib']:.2f} GiB frozen vs {baseline['peak_memory_gib']:.2f} GiB "
            f"trainable vision; step {frozen['step_time_s']:.3f}s vs {baseline['step_time_s']:.3f}s",
            flush=True,
        )
    print(f"OVERALL: {'PASS' if passed else 'FAIL'} ({summary['wall_s']}s)", flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "freeze_vision.json"), "w") as handle:
            json.dump(summary, handle, indent=2)
    torch.distributed.destroy_process_group()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

"""Weight gates for smoke runs: compare the weights a run saved at its last step with the model it started from.

- Some trainable tensor changed: the update really moved the weights (a zero advantage or a broken optimizer
  leaves them as they were, with every metric still finite).
- Every tensor under a frozen module (checks.yaml `frozen: [visual]`) is bit-identical.

The run saves its last step as a Hugging Face folder (SAVE_LAST_STEP). On FSDP verl writes the fp32 master weights
there, so an update at lr 1e-6, which bf16 cannot show, is visible; a frozen tensor loaded from bf16 stays exact.
On Megatron, Megatron-Bridge exports the model's bf16 parameters (the fp32 master copy stays in the optimizer): a
1e-6 step then shows only on weights below ~5e-4 in magnitude, a few percent of a randomly initialised matrix,
which is enough for "some trainable tensor changed".
"""

from __future__ import annotations

from pathlib import Path

# verl saves <default_local_dir>/global_step_<N>/actor/huggingface when `hf_model` is among the save contents
SAVE_LAST_STEP = ["trainer.save_freq=${trainer.total_training_steps}",
                  "actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]"]


def canonical(name: str) -> str:
    """One name per tensor across transformers' layouts (hub Qwen2.5-VL 'model.layers.0' and 'visual.blocks.0',
    transformers 5 'model.language_model.layers.0' and 'model.visual.blocks.0')."""
    name = name.removeprefix("model.")
    return name.removeprefix("language_model.")


def tensor_index(folder: Path) -> dict[str, tuple[Path, str]]:
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors weights")
    index = {}
    for file in files:
        with safe_open(file, framework="pt") as f:
            index.update({canonical(key): (file, key) for key in f.keys()})
    return index


def _load(entry: tuple[Path, str]):
    from safetensors import safe_open

    with safe_open(entry[0], framework="pt") as f:
        return f.get_tensor(entry[1]).float()


def is_frozen(name: str, frozen: list[str]) -> bool:
    return any(part in frozen for part in name.split("."))


def compare(initial: Path, final: Path, frozen: list[str]) -> tuple[list[str], dict]:
    """Failures naming the tensor (none: the update moved the weights and left frozen ones exact), and counts."""
    if not final.is_dir():
        return [f"weights: the run saved no last step at {final} (trainer.save_freq, checkpoint.save_contents)"], {}
    before, after = tensor_index(initial), tensor_index(final)
    common = sorted(before.keys() & after.keys())
    if not common:
        return [f"weights: {final} holds no tensor of {initial} (names differ: e.g. {sorted(after)[:3]})"], {}
    failures, changed, largest = [], 0, (0.0, "")
    for name in common:
        delta = float((_load(before[name]) - _load(after[name])).abs().max())
        if is_frozen(name, frozen):
            if delta:
                failures.append(f"weights: frozen tensor '{name}' changed (max |delta| {delta:.3g})")
        elif delta:
            changed += 1
            largest = max(largest, (delta, name))
    missing = [name for name in before if is_frozen(name, frozen) and name not in after]
    if missing:
        failures.append(f"weights: {len(missing)} frozen tensors were not saved (e.g. '{missing[0]}')")
    if frozen and not any(is_frozen(name, frozen) for name in common):
        failures.append(f"weights: no tensor under {frozen} in {initial}; does checks.yaml name the frozen module?")
    if not changed:
        failures.append(f"weights: none of the {sum(not is_frozen(n, frozen) for n in common)} trainable tensors "
                        "changed: the update did not move the model")
    counts = {"compared": len(common), "changed": changed, "frozen_exact": sum(
        is_frozen(n, frozen) for n in common) - sum("frozen tensor" in f for f in failures),
              "largest_change": {"tensor": largest[1], "max_abs": largest[0]}}
    return failures, counts


# where an actor checkpoint keeps its Hugging Face folder: FSDP's actor/huggingface; Megatron's v2 layout nests it under
# model/ (verl/utils/megatron_utils.py get_hf_model_checkpoint_path)
HF_FOLDER = {"megatron": "model/huggingface"}


def last_step_folder(run_dir: Path, local_dir: str, step: int, engine: str) -> Path:
    base = Path(local_dir)
    actor = (base if base.is_absolute() else run_dir / base) / f"global_step_{step}" / "actor"
    return actor / HF_FOLDER.get(engine, "huggingface")


def local_model(path: str) -> Path:
    """The folder of the model a run started from: a local path, or a hub id already in the local cache."""
    if Path(path).is_dir():
        return Path(path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(path, local_files_only=True, allow_patterns=["*.safetensors", "*.json"]))

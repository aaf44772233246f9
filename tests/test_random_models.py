"""verl_recipes.random_models: the tiny families build exactly the bytes the committed learning proofs were built from,
and a real shape gets the hub config's dimensions and a tokenizer with Qwen's special tokens at the hub's ids."""

import hashlib
import json
import shutil

import pytest
import torch

from verl_recipes import random_models
from verl_recipes.catalog import REPO
from verl_recipes.smoke.tiny import MODELS

# sha256 of every file the tiny builders wrote before they moved into random_models (smoke/tiny.py, smoke/tiny_vl.py),
# at seeds 0 and 1: results/learn/ was built from these
PINNED = json.loads((REPO / "tests/fixtures/tiny_models.sha256.json").read_text())
HUB_CONFIGS = sorted(path.parent.relative_to(random_models.MODELS_DIR).as_posix()
                     for path in random_models.MODELS_DIR.glob("Qwen/*/config.json"))
# the benches' text shape and both vision-language layouts (Qwen2.5-VL's config is flat, Qwen3-VL's nested); the
# tokenizer test below builds Qwen3's, and every committed config's ids are checked by hub_config
BUILT_CONFIGS = ["Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-VL-30B-A3B-Instruct"]


def sha256s(folder) -> dict:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


@pytest.mark.representative
@pytest.mark.parametrize("family, seed", [(family, int(seed)) for family in PINNED for seed in PINNED[family]])
def test_tiny_families_build_the_pinned_bytes(family, seed, tmp_path):
    built = sha256s(MODELS[family](tmp_path / family, seed=seed))
    assert built == PINNED[family][str(seed)], (
        f"the tiny {family} model (seed {seed}) is no longer what the learning proofs in results/learn/ were built "
        f"from: a change of random_models, the tokenizer corpus, the chat template, a tool config in agents/ or the "
        f"transformers/tokenizers/safetensors versions. If it is meant, rerun the proofs and re-pin "
        f"tests/fixtures/tiny_models.sha256.json")


def test_every_smoke_family_is_pinned():
    assert set(PINNED) == set(random_models.TINY) - {"qwen2_tied"}  # the benches' dry-run model proves nothing learnt


def test_the_benches_tiny_model_ties_its_embeddings(tmp_path):
    config = json.loads((MODELS["qwen2_tied"](tmp_path) / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["hidden_size"] == 256


@pytest.mark.slow  # 136M random bf16 weights on the CPU: ~9 s
def test_a_real_shape_with_one_layer_has_the_real_dimensions_and_special_tokens(tmp_path):
    from safetensors import safe_open
    from transformers import AutoTokenizer

    folder = random_models.build(tmp_path / "model", "Qwen/Qwen2.5-0.5B-Instruct", layers=1)
    real = json.loads((REPO / "models/Qwen/Qwen2.5-0.5B-Instruct/config.json").read_text())
    written = json.loads((folder / "config.json").read_text())
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size",
            "tie_word_embeddings", "bos_token_id", "eos_token_id", "max_position_embeddings")
    assert {k: written[k] for k in keys} == {k: real[k] for k in keys}
    assert written["num_hidden_layers"] == 1 and written["dtype"] == "bfloat16"
    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        assert {name.split(".")[2] for name in weights.keys() if name.startswith("model.layers.")} == {"0"}
        embed = weights.get_tensor("model.embed_tokens.weight")
    assert tuple(embed.shape) == (151936, 896) and embed.dtype == torch.bfloat16 and embed.std() > 0
    tok = AutoTokenizer.from_pretrained(folder)
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token, tok.pad_token_id) == ("<|im_end|>", 151645,
                                                                                  "<|endoftext|>", 151643)
    assert tok.convert_tokens_to_ids(["<|im_start|>", "<tool_call>", "<|file_sep|>"]) == [151644, 151657, 151664]
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [151645, 151643] and generation["pad_token_id"] == 151643


def test_the_real_tokenizer_covers_the_vocabulary_and_keeps_tool_tags(tmp_path):
    from transformers import AutoTokenizer

    config = random_models.hub_config("Qwen/Qwen3-30B-A3B")
    random_models.vocab_tokenizer(tmp_path, config)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert len(tok) == config.vocab_size == 151936
    assert tok.decode([300, 151935]) == "x300x151935"  # any id a random model samples decodes
    letters = tok.convert_tokens_to_ids(["a", "b"])  # byte symbols, one token a letter
    assert tok.encode("<tool_call>ab</tool_call><think>") == [151657, *letters, 151658, 151667]
    assert tok.decode([151657, 151645, 151667], skip_special_tokens=True) == "<tool_call><think>"  # not special


@pytest.mark.representative
@pytest.mark.parametrize("hub_id", BUILT_CONFIGS)
def test_a_real_shape_builds_with_its_token_ids(hub_id, tmp_path):
    """Config, tokenizer and processor only (the weights of these shapes are GBs): every token id the config names
    is where the tokenizer has that token, and a vision-language model's chat renders an image with them."""
    from transformers import AutoConfig, AutoTokenizer

    folder = random_models.build(tmp_path, hub_id, layers=1, weights=False)
    config, tok = AutoConfig.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    text = getattr(config, "text_config", config)
    real = json.loads((random_models.MODELS_DIR / hub_id / "config.json").read_text())
    real_text = real.get("text_config", real)
    assert (text.hidden_size, text.num_attention_heads, text.vocab_size) == (
        real_text["hidden_size"], real_text["num_attention_heads"], real_text["vocab_size"])
    assert text.num_hidden_layers == 1 and len(tok) == text.vocab_size
    for key, token in random_models.ROLES.items():
        for owner in (real, real_text):
            if key in owner:
                assert tok.convert_tokens_to_ids(token) == owner[key], key
    if hasattr(config, "vision_config"):
        message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}]
        ids = tok.apply_chat_template(message, add_generation_prompt=True, tokenize=True, return_dict=False)
        start = ids.index(config.vision_start_token_id)
        assert ids[start:start + 3] == [config.vision_start_token_id, config.image_token_id, config.vision_end_token_id]
        processor = json.loads((folder / "preprocessor_config.json").read_text())
        assert processor["patch_size"] == config.vision_config.patch_size


@pytest.mark.parametrize("hub_id", HUB_CONFIGS)
def test_layers_overrides_only_the_layer_count(hub_id):
    """(hub_config also checks each committed config's token ids against Qwen's tokenizer)"""
    def text(config):  # transformers derives layer_types from the count
        found = getattr(config, "text_config", config).to_dict()
        return {k: v for k, v in found.items() if k not in ("num_hidden_layers", "layer_types")}

    real, cut = random_models.hub_config(hub_id), random_models.hub_config(hub_id, layers=2)
    assert getattr(cut, "text_config", cut).num_hidden_layers == 2
    assert text(cut) == text(real)
    if hasattr(real, "vision_config"):
        assert cut.vision_config.to_dict() == real.vision_config.to_dict()


def test_a_missing_hub_config_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"models/Qwen/Qwen9-1B/config\.json not found"):
        random_models.build(tmp_path, "Qwen/Qwen9-1B")


def test_layers_beyond_the_model_are_refused():
    with pytest.raises(ValueError, match=r"layers=25: .*Qwen2\.5-0\.5B-Instruct/config\.json has num_hidden_layers 24"):
        random_models.hub_config("Qwen/Qwen2.5-0.5B-Instruct", layers=25)


def test_a_family_without_a_tokenizer_layout_is_refused():
    with pytest.raises(ValueError, match=r"SmolLM2-135M-Instruct/config\.json: model_type 'llama' has no tokenizer"):
        random_models.hub_config("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_a_token_id_off_qwens_tokenizer_is_named(tmp_path, monkeypatch):
    """A base model's config (eos <|endoftext|>) would get a tokenizer whose eos is <|im_end|>: refused by key."""
    folder = tmp_path / "Qwen/Qwen2.5-0.5B"
    shutil.copytree(REPO / "models/Qwen/Qwen2.5-0.5B-Instruct", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "eos_token_id": 151643}))
    monkeypatch.setattr(random_models, "MODELS_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"Qwen2\.5-0\.5B/config\.json: eos_token_id is 151643, but Qwen's tokenizer "
                                         r"has <\|im_end\|> at 151645"):
        random_models.hub_config("Qwen/Qwen2.5-0.5B")


def test_an_unknown_tiny_family_is_named(tmp_path):
    with pytest.raises(ValueError, match="no tiny family 'llama'"):
        random_models.build_tiny(tmp_path, "llama", tokenizer=None)

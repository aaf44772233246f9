"""Random-init Hugging Face model folders for every family and size: bf16 safetensors weights, config.json,
generation_config.json, a tokenizer with the repository's chat template and, for the vision-language families, the
processor configs laid out as on the hub, so that verl and vLLM load the folder offline like the real model.

- build(folder, hub_id, seed, layers): the real shape of models/<hub id>/config.json, or the same with fewer text
  layers (`layers`) for shapes the GPUs at hand cannot hold. Its tokenizer covers the whole vocabulary: the 256 byte
  symbols, the family's special tokens at the hub's ids (those the config names are checked), fillers "x<id>" between,
  so any id a random model samples decodes. Built in bf16 on the GPU where it fits, else on the CPU; 5 GB shards.
- build_tiny(folder, family, tokenizer, seed): the tiny model of a family (TINY) that the smokes and learning runs use,
  with the small BPE tokenizer `tokenizer` trains (verl_recipes/smoke/tiny.py MODELS binds it); the config names the
  tokenizer's special tokens. Initialised in fp32 on the CPU and cast, so a seed gives the same bytes on any machine:
  the committed learning proofs (results/learn/) were built from them, and tests/test_random_models.py pins them.

A tiny config and a real one take the same path from there (_write).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from verl_recipes.catalog import REPO
from verl_recipes.smoke.tiny_moe import MOE

MODELS_DIR = REPO / "models"
SHARD_SIZE = "5GB"  # as the hub's Qwen checkpoints are cut

# Qwen's tokenizers from id 151643 on: special tokens, then added tokens that are not special (so a decode that skips
# special tokens keeps <tool_call> and <think>); Qwen3's add four.
FIRST_ADDED_ID = 151643
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
QWEN2_5_ADDED = ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                 "<|repo_name|>", "<|file_sep|>"]
QWEN3_ADDED = QWEN2_5_ADDED + ["<tool_response>", "</tool_response>", "<think>", "</think>"]
ADDED_TOKENS = {"qwen2": QWEN2_5_ADDED, "qwen2_5_vl": QWEN2_5_ADDED, "qwen3": QWEN3_ADDED, "qwen3_moe": QWEN3_ADDED,
                "qwen3_vl": QWEN3_ADDED, "qwen3_vl_moe": QWEN3_ADDED}
# the token each id key of a config names: what the chat template, the processor and generation emit
ROLES = {"bos_token_id": "<|endoftext|>", "pad_token_id": "<|endoftext|>", "eos_token_id": "<|im_end|>",
         "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>",
         "vision_token_id": "<|vision_pad|>", "image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>"}
TEXT_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
VISION_IDS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")

HEAD_DIM = 64
# 4 layers, 4 heads of HEAD_DIM (a size vLLM's attention kernels support), GQA 2; untied embeddings like the recipes'
# models (Qwen2.5-7B, Qwen3-30B-A3B), since FSDP2 wraps an untied lm_head apart and some verl paths trip on it
TINY_TEXT = dict(hidden_size=4 * HEAD_DIM, intermediate_size=8 * HEAD_DIM, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=4096)
# a 2-block vision tower, 2x2 merge as the real models
TINY_VISION = dict(depth=2, hidden_size=128, intermediate_size=256, num_heads=2,
                   out_hidden_size=TINY_TEXT["hidden_size"], spatial_merge_size=2, temporal_patch_size=2)


def _mrope(section: list[int], **extra) -> dict:
    return {"rope_type": "default", "rope_theta": 1e6, "mrope_section": section, **extra}


def _qwen3_vl(model_type: str, architecture: str, **text_extra) -> dict:
    """Qwen3-VL: patch 16, one deepstack merger."""
    return {"model_type": model_type, "architectures": [architecture], "tie_word_embeddings": False,
            "text_config": {**TINY_TEXT, "head_dim": HEAD_DIM, **text_extra,
                            "rope_parameters": _mrope([12, 10, 10], mrope_interleaved=True)},
            "vision_config": {**TINY_VISION, "patch_size": 16, "num_position_embeddings": 64,
                              "deepstack_visual_indexes": [0]}}


# The tiny families (smoke/tiny.py MODELS, recipe cards' tiny_family); vocab_size and token ids come from the tokenizer
TINY = {
    "qwen2": {"model_type": "qwen2", **TINY_TEXT, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    # the benches' CPU dry runs: tied as Qwen2.5-1.5B, since verl's fused-kernel path (torch backend) reads an untied
    # lm_head's weight as FSDP2's sharded DTensor and fails
    "qwen2_tied": {"model_type": "qwen2", **TINY_TEXT, "tie_word_embeddings": True, "torch_dtype": "bfloat16"},
    # Qwen3-30B-A3B's architecture (QK norm, every layer sparse, top-k normalised) with the experts of tiny_moe.MOE
    "qwen3_moe": {"model_type": "qwen3_moe", **TINY_TEXT, **MOE, "tie_word_embeddings": False,
                  "torch_dtype": "bfloat16"},
    # patch 14 as the real model; mrope_section sums to HEAD_DIM / 2
    "qwen2_5_vl": {"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
                   "tie_word_embeddings": False,
                   "text_config": {**TINY_TEXT, "rope_parameters": _mrope([8, 12, 12])},
                   "vision_config": {**TINY_VISION, "patch_size": 14, "window_size": 112,
                                     "fullatt_block_indexes": [1]}},
    "qwen3_vl": _qwen3_vl("qwen3_vl", "Qwen3VLForConditionalGeneration"),
    # 96-wide experts: no expert matrix is square ([96 | 192] x 256), so the bridge's and vLLM's shape-based layout
    # guesses cannot silently take a transposed weight for the right one (128-wide, gate_up would be 256 x 256)
    "qwen3_vl_moe": _qwen3_vl("qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration",
                              **{**MOE, "moe_intermediate_size": 96}),
}

FUSED_EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
FUSED_ON_HUB = {"qwen3_vl_moe"}  # families whose hub checkpoints store the experts fused (Qwen3-MoE's: one per expert)
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def hub_config(hub_id: str, layers: int | None = None):
    """The transformers config of models/<hub id>/config.json, with `layers` text layers if given. Refuses a config
    whose family has no tokenizer layout here, or whose token ids are not where Qwen's tokenizer has those tokens."""
    path = MODELS_DIR / hub_id / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: commit the hub's config.json of '{hub_id}' there "
                                f"(models/README.md)")
    config = json.loads(path.read_text())
    text = config.get("text_config", config)
    if config.get("model_type") not in ADDED_TOKENS:
        raise ValueError(f"{path}: model_type {config.get('model_type')!r} has no tokenizer layout in "
                         f"random_models.ADDED_TOKENS (known: {', '.join(ADDED_TOKENS)})")
    ids = hub_token_ids(config["model_type"])
    if text["vocab_size"] <= max(ids.values()):
        raise ValueError(f"{path}: vocab_size {text['vocab_size']} cannot hold Qwen's added tokens "
                         f"({min(ids.values())}-{max(ids.values())})")
    for owner in (config, text):
        for key, token in ROLES.items():
            if owner.get(key, ids[token]) != ids[token]:
                raise ValueError(f"{path}: {key} is {owner[key]}, but Qwen's tokenizer has {token} at {ids[token]}")
    if layers is not None:
        if not 1 <= layers <= text["num_hidden_layers"]:
            raise ValueError(f"layers={layers}: {path} has num_hidden_layers {text['num_hidden_layers']}; "
                             f"give 1 to {text['num_hidden_layers']}")
        text["num_hidden_layers"] = layers
    return _config(config)


def hub_token_ids(model_type: str) -> dict[str, int]:
    """The special and added tokens of the family's hub tokenizer, at their ids."""
    tokens = QWEN_SPECIAL + ADDED_TOKENS[model_type]
    return dict(zip(tokens, range(FIRST_ADDED_ID, FIRST_ADDED_ID + len(tokens))))


def build(folder: Path, hub_id: str, seed: int = 0, layers: int | None = None, *, weights: bool = True) -> Path:
    """`folder` holding a random-init model of `hub_id`'s real shape (models/<hub id>/config.json), `layers` text layers
    if given; without `weights`, everything but the weights (for vLLM's dummy load)."""
    import torch

    config = hub_config(hub_id, layers)
    folder.mkdir(parents=True, exist_ok=True)
    tok = vocab_tokenizer(folder, config)
    device = _build_device(config) if weights else None
    return _write(folder, config, tok, seed, device, torch.bfloat16, weights)


def build_tiny(folder: Path, family: str, tokenizer, seed: int = 0) -> Path:
    """`folder` holding the tiny model of `family` (TINY) with the tokenizer `tokenizer(folder, random.Random(seed))`
    trains and saves there."""
    import random

    import torch

    if family not in TINY:
        raise ValueError(f"no tiny family {family!r}; known: {', '.join(TINY)}")
    folder.mkdir(parents=True, exist_ok=True)
    tok = tokenizer(folder, random.Random(seed))
    return _write(folder, _config(tiny_config(family, tok)), tok, seed, "cpu", torch.float32)


def tiny_config(family: str, tok) -> dict:
    """TINY[family] with the tokenizer's vocabulary (padded to 64) and special-token ids."""
    config = copy.deepcopy(TINY[family])
    text = config.get("text_config", config)
    text["vocab_size"] = (len(tok) + 63) // 64 * 64
    text.update({key: tok.convert_tokens_to_ids(ROLES[key]) for key in TEXT_IDS})
    if "vision_config" in config:
        config.update({key: tok.convert_tokens_to_ids(ROLES[key]) for key in VISION_IDS})
    return config


def vocab_tokenizer(folder: Path, config):
    """A byte-level BPE without merges over the config's whole vocabulary (hub_config checked it holds the family's
    tokens): the 256 byte symbols, so one ASCII letter is one token, the special and added tokens at the hub's ids,
    fillers "x<id>" that only a model's output holds. Saved in `folder` with the repository's chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from verl_recipes.smoke.tokenizer import chat_template

    text = getattr(config, "text_config", config)
    symbols = [f"x{i}" for i in range(text.vocab_size)]
    symbols[:256] = sorted(pre_tokenizers.ByteLevel.alphabet())
    for token, i in hub_token_ids(config.model_type).items():
        symbols[i] = token
    tok = Tokenizer(models.BPE({symbol: i for i, symbol in enumerate(symbols)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=ROLES["eos_token_id"],
                                     pad_token=ROLES["pad_token_id"], additional_special_tokens=QWEN_SPECIAL[1:],
                                     model_max_length=text.max_position_embeddings)
    hf_tok.add_tokens(ADDED_TOKENS[config.model_type])  # matched whole as by the hub's tokenizer, at their ids
    hf_tok.chat_template = chat_template()
    hf_tok.save_pretrained(folder)
    return hf_tok


def _config(config: dict):
    from transformers import AutoConfig

    return AutoConfig.for_model(**config)


def _model(config, device: str, dtype):
    """`config`'s model built on `device`, its parameters created and initialised in `dtype` (transformers' init)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    auto = AutoModelForImageTextToText if hasattr(config, "vision_config") else AutoModelForCausalLM
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return auto._model_mapping[type(config)](config)
    finally:
        torch.set_default_dtype(default)


def _build_device(config) -> str:
    """The GPU where the bf16 weights fit in its free memory (seconds even at 30B), else the CPU (far slower: about
    20 s a billion parameters on two cores); the size is measured on the meta device, which allocates nothing."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    size = sum(p.numel() * p.element_size() for p in _model(config, "meta", torch.bfloat16).parameters())
    return "cuda" if size < 0.9 * torch.cuda.mem_get_info()[0] else "cpu"


def _write(folder: Path, config, tok, seed: int, device: str | None, init_dtype, weights: bool = True) -> Path:
    """The weights (random init in `init_dtype` on `device`, saved in bf16), config.json, generation_config.json and
    the processor configs of `config` in `folder`, where the tokenizer `tok` already is."""
    import torch

    if weights:
        torch.manual_seed(seed)
        model = _model(config, device, init_dtype).to(torch.bfloat16)
        fused = [param for name, param in model.named_parameters()
                 if config.model_type in FUSED_ON_HUB and name.endswith(FUSED_EXPERTS)]
        for param in fused:  # in place, one tensor at a time: no second copy of the experts
            param.data = param.data.transpose(1, 2).contiguous()
        # Fused experts (Qwen3-VL-MoE) are now as the hub's checkpoints store them, [experts, in, out]: transformers 5
        # holds them as [experts, out, in] and transposes on load, but saves a model built from a config in its own
        # layout. Megatron-Bridge exports in the checkpoint's layout and vLLM transposes what it receives, so with
        # transformers' layout the first weight push into vLLM failed (`The size of tensor a (128) must match ... b
        # (256)`, 2 x H200, 2026-11-26). Their names are already the hub's, and transformers' reversal on save would
        # turn them back (its Transpose flips any tensor whose shape is not the parameter's); for the other families
        # the reversal gives the hub's names (Qwen2.5-VL: model.layers.*, visual.*; Qwen3-MoE: one tensor per expert).
        model.save_pretrained(folder, max_shard_size=SHARD_SIZE, save_original_format=not fused)
        del model, fused
        if device == "cuda":
            torch.cuda.empty_cache()
    else:
        config.save_pretrained(folder)
    pad, eos = tok.convert_tokens_to_ids(ROLES["pad_token_id"]), tok.convert_tokens_to_ids(ROLES["eos_token_id"])
    (folder / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": pad, "eos_token_id": [eos, pad], "pad_token_id": pad, "do_sample": True}))
    for name, content in processor_files(config).items():
        (folder / name).write_text(json.dumps(content, indent=1))
    return folder


def processor_files(config) -> dict[str, dict]:
    """The processor configs of a vision-language config, laid out as on the hub; written as files rather than built,
    because transformers' Qwen-VL processors need a video processor, which needs torchvision."""
    if not hasattr(config, "vision_config"):
        return {}
    vision = config.vision_config
    grid = {"patch_size": vision.patch_size, "temporal_patch_size": vision.temporal_patch_size,
            "merge_size": vision.spatial_merge_size}
    if config.model_type == "qwen2_5_vl":  # one preprocessor config; the video processor falls back to it
        return {"preprocessor_config.json": {
            "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
            "min_pixels": 3136, "max_pixels": 12845056, **grid, "image_mean": CLIP_MEAN, "image_std": CLIP_STD}}
    common = {"processor_class": "Qwen3VLProcessor", **grid, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}
    return {  # Qwen3-VL: separate image and video processor configs
        "preprocessor_config.json": {"image_processor_type": "Qwen2VLImageProcessor",
                                     "size": {"shortest_edge": 65536, "longest_edge": 16777216}, **common},
        "video_preprocessor_config.json": {"video_processor_type": "Qwen3VLVideoProcessor",
                                           "size": {"shortest_edge": 4096, "longest_edge": 25165824}, **common},
    }

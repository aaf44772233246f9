"""A small byte-level BPE tokenizer trained on a corpus, saved as a Hugging Face tokenizer (no hub).

Tiny models render chats with the repository's Qwen2.5 hermes tool template (configs/agent/
qwen25_vl_tool_chat_template.yaml: tool schemas in the system turn, <tool_call> blocks, tool replies in user turns,
Qwen-VL image parts), so a tiny smoke renders tools, calls and replies as the real models do.
"""

from __future__ import annotations

from pathlib import Path

from verl_recipes import yaml_parser
from verl_recipes.catalog import REPO
from verl_recipes.data.prompts import DEEPEYES_SYSTEM

TEMPLATE_FRAGMENT = REPO / "configs/agent/qwen25_vl_tool_chat_template.yaml"
TOOL_CONFIGS = sorted((REPO / "agents").glob("*.yaml"))  # verl tool configs sit beside their code
# the system turns our datasets put in front of tools: the template's default and DeepEyes'
SYSTEM_PROMPTS = ("You are a helpful assistant.", DEEPEYES_SYSTEM)


def chat_template() -> str:
    return yaml_parser.safe_load(TEMPLATE_FRAGMENT.read_text())["actor_rollout_ref"]["model"]["custom_chat_template"]


def tool_schemas(tool_config: Path) -> list[dict]:
    """The schemas verl renders for a tool config (verl.tools.schemas, as its tool agent dumps them)."""
    from verl.tools.schemas import OpenAIFunctionToolSchema

    return [OpenAIFunctionToolSchema.model_validate(tool["tool_schema"]).model_dump(exclude_unset=True, exclude_none=True)
            for tool in yaml_parser.safe_load(tool_config.read_text())["tools"]]


def bpe_tokenizer(folder: Path, corpus: list[str], special_tokens: list[str], template: str | None = None):
    """`special_tokens[0]` pads; `<|im_end|>` ends a turn. Trained on `corpus` so its prompts take few tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=2048, special_tokens=special_tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token=special_tokens[0],
                                     additional_special_tokens=special_tokens[1:], model_max_length=4096)
    hf_tok.chat_template = template or chat_template()
    hf_tok.save_pretrained(folder)
    return hf_tok


def tiny_tokenizer(folder: Path, corpus: list[str], special_tokens: list[str]):
    """A tokenizer whose corpus also holds what the chat template renders around every tool config in agents (the
    schemas, the tool instructions, a call), so an agent recipe's prompt fits a tiny prompt budget. Trained twice:
    once to render those texts, once with them."""
    if not TOOL_CONFIGS:
        raise FileNotFoundError(f"no tool config under {REPO / 'agents'}: agent prompts would not fit")
    first = bpe_tokenizer(folder, corpus, special_tokens)
    rendered = []
    for config in TOOL_CONFIGS:
        schemas = tool_schemas(config)
        call = {"name": schemas[0]["function"]["name"], "arguments": {}}
        for system in SYSTEM_PROMPTS:
            rendered.append(first.apply_chat_template(
                [{"role": "system", "content": system}, {"role": "user", "content": "q"},
                 {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]}],
                tools=schemas, tokenize=False))
    return bpe_tokenizer(folder, corpus + rendered * 50, special_tokens)

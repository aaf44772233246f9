"""GPU-free agent round trip with verl 0.9.1's own pieces and our tools:
tool schemas -> chat template -> model text -> hermes ToolParser -> ToolAgentLoop._call_tool
(registry-loaded tools) -> tool message -> chat template again."""

import asyncio
import json
from pathlib import Path

import pytest
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.tool_registry import load_all_tools

CONFIG_DIR = Path(__file__).resolve().parents[1] / "agents"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
# Qwen2.5(-VL)-style: tools in the system prompt, hermes <tool_call> blocks, tool replies as user turns.
CHAT_TEMPLATE = """
{%- macro render(content) -%}
{%- if content is string -%}{{ content }}
{%- else -%}{%- for part in content -%}
{%- if part.type == 'image' -%}<|vision_start|><|image_pad|><|vision_end|>
{%- elif part.type == 'text' -%}{{ part.text }}{%- endif -%}
{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- render(messages[0].content) + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within '
    '<tool_call></tool_call> XML tags.<|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + render(messages[0].content) + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\\n' + render(message.content) + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- set call = tool_call.function if tool_call.function is defined else tool_call %}
{{- '\\n<tool_call>\\n{"name": "' + call.name + '", "arguments": ' }}
{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + render(message.content) + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


@pytest.fixture(scope="module")
def tokenizer():
    """A tiny byte-level BPE tokenizer (no hub) with the chat template above."""
    corpus = [
        'I will run code.\n<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(6 * 7)"}}',
        "\n</tool_call><|im_end|>",
        'Zoom in: {"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [10, 20, 110, 220], "label": "cat"}}',
        "The answer is 42. Let me check with Python: import math; print(math.factorial(5))",
    ] * 20
    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    model.train_from_iterator(corpus, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=model,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL[1:],
        clean_up_tokenization_spaces=False,
    )
    tok.add_tokens(TOOL_TOKENS)  # plain added tokens, as in Qwen2.5
    tok.chat_template = CHAT_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def tools():
    loaded = load_all_tools(str(CONFIG_DIR / "code_interpreter.yaml"), None)
    loaded += load_all_tools(str(CONFIG_DIR / "image_zoom.yaml"), None)
    return {tool.name: tool for tool in loaded}


class Conversation:
    """One trajectory driven through verl's parser and ToolAgentLoop tool dispatch."""

    def __init__(self, tokenizer, tools, image=None, tools_kwargs=None):
        self.tokenizer = tokenizer
        self.schemas = [tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for tool in tools.values()]
        self.parser = ToolParser.get_tool_parser("hermes", tokenizer)
        self.loop = ToolAgentLoop.__new__(ToolAgentLoop)  # only the tool-dispatch part of the loop is used
        self.loop.tools = tools
        self.loop.max_parallel_calls = 1
        self.loop.max_tool_response_length = 256  # verl 0.9.1 rollout.multi_turn defaults
        self.loop.tool_response_truncate_side = "middle"
        prompt = [{"type": "image", "image": image}, {"type": "text", "text": "Solve it."}] if image else "Solve it."
        messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": prompt}]
        images = [image] if image else None
        self.data = AgentData(messages, images, None, None, None, {}, "request-0", tools_kwargs or {})

    def render(self):
        return self.tokenizer.apply_chat_template(
            self.data.messages, tools=self.schemas, tokenize=False, add_generation_prompt=True
        )

    def model_turn(self, text):
        """Parse the model's text like ToolAgentLoop does, run the calls, append the replies."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        content, self.data.tool_calls = asyncio.run(self.parser.extract_tool_calls(ids, list(self.loop.tools.values())))
        self.data.messages.append(self.loop._build_assistant_message(content, self.data))
        return [self.call(tool_call) for tool_call in self.data.tool_calls]

    def call(self, tool_call):
        response, _, _ = asyncio.run(self.loop._call_tool(tool_call, self.data.tools_kwargs, self.data))
        if response.image:  # the structured tool message verl builds for images
            content = [{"type": "image", "image": image} for image in response.image]
            self.data.messages.append({"role": "tool", "content": content + [{"type": "text", "text": response.text}]})
        else:
            self.data.messages.append({"role": "tool", "content": response.text or ""})
        return response


def _call(name, arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_prompt_shows_both_tool_schemas(tokenizer, tools):
    prompt = Conversation(tokenizer, tools).render()
    assert '"name": "code_interpreter"' in prompt and '"name": "image_zoom_in_tool"' in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_code_interpreter_round_trip(tokenizer, tools):
    chat = Conversation(tokenizer, tools)
    code = "```python\nimport math\nmath.factorial(5) + 6 * 7\n```"
    (response,) = chat.model_turn("Let me compute.\n" + _call("code_interpreter", {"code": code}))
    assert response.text == "162"
    rendered = chat.render()
    assert '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": ' in rendered
    assert "<|im_start|>user\n<tool_response>\n162\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in rendered


def test_long_tool_output_is_cut_by_verl(tokenizer, tools):
    chat = Conversation(tokenizer, tools)
    (response,) = chat.model_turn(_call("code_interpreter", {"code": "print('a' * 5000)"}))
    assert "...(truncated)..." in response.text and len(response.text) < 300


def test_image_zoom_round_trip_uses_the_prompt_image(tokenizer, tools):
    image = Image.new("RGB", (560, 420), "navy")
    chat = Conversation(tokenizer, tools, image=image)
    (response,) = chat.model_turn(_call("image_zoom_in_tool", {"bbox_2d": [10, 20, 110, 220], "label": "cat"}))
    assert response.image[0].size == (112, 196)
    assert response.text == "Zoomed in on the image to the region [10, 20, 110, 220] with label cat."
    assert (
        "<tool_response>\n<|vision_start|><|image_pad|><|vision_end|>Zoomed in on the image to the region "
        in chat.render()
    )


def test_image_zoom_round_trip_with_tools_kwargs_image(tokenizer, tools):
    tools_kwargs = {"image_zoom_in_tool": {"create_kwargs": {"image": Image.new("RGB", (560, 420), "teal")}}}
    chat = Conversation(tokenizer, tools, tools_kwargs=tools_kwargs)
    (response,) = chat.model_turn(_call("image_zoom_in_tool", {"bbox_2d": [0, 0, 56, 56]}))
    assert response.image[0].getpixel((5, 5)) == (0, 128, 128)


@pytest.mark.parametrize(
    "model_text, error",
    [
        (_call("python", {"code": "print(1)"}), "Unknown function 'python'. Available tools: ['code_interpreter'"),
        (_call("code_interpreter", {"code": 123}), "Error: argument `code` must be a string, got int."),
        (_call("code_interpreter", "print(1)"), "Error: code_interpreter needs a JSON object"),
        (_call("code_interpreter", {}), "Error: code_interpreter needs a JSON object"),
        (_call("image_zoom_in_tool", {"bbox_2d": "10,20,30,40"}), "Error: bbox_2d must be a list of 4 numbers"),
        (_call("image_zoom_in_tool", {"bbox_2d": [600, 500, 700, 600]}), "lies outside the 560x420 image"),
        (_call("image_zoom_in_tool", {"bbox_2d": [50, 50, 10, 10]}), "needs x1 < x2 and y1 < y2"),
    ],
)
def test_malformed_calls_get_an_error_reply_and_the_loop_goes_on(tokenizer, tools, model_text, error):
    chat = Conversation(tokenizer, tools, image=Image.new("RGB", (560, 420), "gray"))
    (reply,) = chat.model_turn(model_text)
    assert error in reply.text and reply.image is None
    assert error in chat.render()
    (next_reply,) = chat.model_turn(_call("code_interpreter", {"code": "print('recovered')"}))
    assert next_reply.text == "recovered"
    assert chat.render().count("<tool_response>") == 2


def test_broken_json_arguments_get_an_error_reply(tokenizer, tools):
    chat = Conversation(tokenizer, tools)  # parsers other than hermes pass raw argument strings through
    reply = chat.call(FunctionCall(name="code_interpreter", arguments='{"code": "print(1)'))
    assert reply.text.startswith("Invalid JSON in arguments for 'code_interpreter'")


def test_unparseable_tool_call_block_is_dropped_by_hermes(tokenizer, tools):
    chat = Conversation(tokenizer, tools)
    assert chat.model_turn('<tool_call>\n{"name": "code_interpreter", "arguments": {"code": \n</tool_call>') == []
    assert chat.data.messages[-1]["role"] == "assistant"  # verl 0.9.1 ends the turn without a reply

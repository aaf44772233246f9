"""retool_sft: JoeYing/ReTool-SFT as multi-turn tool-calling conversations for verl's SFT trainer.

verl 0.9.1's sft_trainer reads data.messages_key (default "messages") and data.tools_key (default "tools")
through MultiTurnSFTDataset, which applies the tokenizer's chat template with `tools`.

Each source row is a user turn (an instruction template around "*user question:*" <question>) and one
assistant turn that interleaves text, <code>```python ...```</code> blocks, <interpreter>output</interpreter>
blocks and a final <answer>...</answer>. Output row:
- messages: user (question + RETOOL_INSTRUCTION, the same prompt dapo_math_retool uses in RL), then per code
  block an assistant turn (the text before it, tool_calls=[code_interpreter(code)]) and a tool turn (the
  interpreter output), then the final assistant turn (the <answer> tags dropped, the \\boxed{} kept);
- tools: the code_interpreter schema of the RL tool config (agents/code_interpreter.yaml).
A code block without interpreter output, an unclosed tag or an empty final answer makes the row bad.
File: train.parquet.
"""

import re

from verl_recipes.data.common import BadRow, Part, Spec, Stream
from verl_recipes.data.prompts import RETOOL_INSTRUCTION, code_interpreter_tool

RETOOL_SFT = "JoeYing/ReTool-SFT"
QUESTION_MARKER = "*user question:*"
ANSWER_FORMAT_MARKER = "Remember to place the final answer"
_PYTHON_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def question(user_text: str) -> str:
    _, marker, tail = user_text.partition(QUESTION_MARKER)
    if not marker:
        raise BadRow(f"user turn has no '{QUESTION_MARKER}' marker")
    text = tail.split(ANSWER_FORMAT_MARKER)[0].strip()
    if not text:
        raise BadRow("question after the marker is empty")
    return text


def _between(text: str, start: int, open_tag: str, close_tag: str) -> tuple[str, int]:
    """Content of the `open_tag`...`close_tag` pair that starts at `start`, and the index after it."""
    end = text.find(close_tag, start + len(open_tag))
    if end == -1:
        raise BadRow(f"{open_tag} at offset {start} is never closed")
    return text[start + len(open_tag) : end], end + len(close_tag)


def tool_turns(reply: str) -> list[dict]:
    """The assistant reply split into assistant / tool messages."""
    messages = []
    rest = reply
    while (code_at := rest.find("<code>")) != -1:
        before = rest[:code_at]
        if "<interpreter>" in before or "</code>" in before:
            raise BadRow("<interpreter> or </code> without a preceding <code> block")
        block, after_code = _between(rest, code_at, "<code>", "</code>")
        fenced = _PYTHON_FENCE.search(block)
        code = (fenced.group(1) if fenced else block).strip()
        if not code:
            raise BadRow(f"empty code block in turn {len(messages) // 2 + 1}")
        output_at = rest.find("<interpreter>", after_code)
        if output_at == -1 or rest[after_code:output_at].strip():
            raise BadRow(f"code block {len(messages) // 2 + 1} is not followed by <interpreter> output")
        output, rest_at = _between(rest, output_at, "<interpreter>", "</interpreter>")
        call = {"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": code}}}
        messages.append({"role": "assistant", "content": before.strip(), "tool_calls": [call]})
        messages.append({"role": "tool", "content": output.strip()})
        rest = rest[rest_at:]
    if "<interpreter>" in rest or "</code>" in rest:
        raise BadRow("<interpreter> or </code> without a preceding <code> block")
    final = rest.replace("<answer>", "").replace("</answer>", "").strip()
    if not final:
        raise BadRow("no final answer after the last interpreter output")
    messages.append({"role": "assistant", "content": final})
    return messages


def retool_sft_row(row: dict, note) -> dict:
    turns = row["messages"]
    if not isinstance(turns, list) or len(turns) != 2 or [t.get("role") for t in turns] != ["user", "assistant"]:
        raise BadRow("messages is not one user turn followed by one assistant turn")
    problem = question(turns[0].get("content") or "")
    user = {"role": "user", "content": problem + RETOOL_INSTRUCTION}
    return {
        "messages": [user, *tool_turns(turns[1].get("content") or "")],
        "tools": [code_interpreter_tool()],
        "extra_info": {"question": problem},
    }


SPEC = Spec(
    parts={"retool_sft": Part(RETOOL_SFT)},
    files=("train.parquet",),
    streams=(Stream("retool_sft", "train", ("messages",), retool_sft_row, "train.parquet"),),
)

"""The verl `code_interpreter` tool (agents/code_interpreter.py)."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from verl_recipes.agents.code_interpreter import (
    CodeInterpreterTool,
    extract_code,
    format_result,
    print_last_expression,
)
from verl_recipes.agents.sandbox import LocalSandbox, SandboxResult, SandboxUnavailableError
from verl_recipes.agents.sandbox_fusion import SandboxFusionClient

SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "Run Python code.",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        },
    }
)


def _tool(**config):
    return CodeInterpreterTool({"type": "native", "timeout_s": 60, "memory_limit_mb": 1024, **config}, SCHEMA)


def _execute(tool, parameters):
    async def call():
        instance_id, _ = await tool.create(create_kwargs={})
        try:
            return await tool.execute(instance_id, parameters)
        finally:
            await tool.release(instance_id)

    return asyncio.run(call())


@pytest.mark.parametrize(
    "text, code",
    [
        ("print(1)", "print(1)"),
        ("Let me compute.\n```python\nx = 2\nprint(x)\n```\nDone.", "x = 2\nprint(x)"),
        ("```py\nprint(3)\n```", "print(3)"),
        ("```\nprint(4)\n```", "print(4)"),
        ("```python\nfirst()\n```\n```python\nsecond()\n```", "first()"),
    ],
)
def test_extract_code_takes_the_first_fenced_block(text, code):
    assert extract_code(text) == code


@pytest.mark.parametrize(
    "code, expected",
    [
        ("x = 3\nx * 2", "x = 3\nprint(x * 2)"),
        ("import math\nmath.pi  # pi", "import math\nprint(math.pi)  # pi"),
        ("x = 1; x + 1", "x = 1; print(x + 1)"),
        ("sorted(\n  [3, 1]\n)", "print(sorted(\n  [3, 1]\n))"),
        ("s = 'λ'; s * 2", "s = 'λ'; print(s * 2)"),
        ("print('done')", "print('done')"),
        ("x = 5", "x = 5"),
        ("for i in range(2):\n    i", "for i in range(2):\n    i"),
        ("def f(:", "def f(:"),
        ("", ""),
    ],
)
def test_a_bare_last_expression_is_printed(code, expected):
    assert print_last_expression(code) == expected


def test_execute_runs_code_and_prints_the_last_expression():
    response, reward, metrics = _execute(_tool(), {"code": "```python\nimport sympy\nsympy.factorial(10)\n```"})
    assert (response.text, reward, metrics["status"]) == ("3628800", 0.0, "ok")


def test_execute_returns_errors_and_limits_as_text():
    tool = _tool(timeout_s=1)
    assert "ZeroDivisionError: division by zero" in _execute(tool, {"code": "1/0"})[0].text
    timeout_text = "[timeout: wall time limit of 1 s exceeded]"
    assert _execute(tool, {"code": "import time\ntime.sleep(30)"})[0].text == timeout_text
    assert _execute(tool, {"code": "x = 1"})[0].text == "(no output)"


@pytest.mark.parametrize(
    "parameters, error",
    [
        ({}, "needs a JSON object with a string argument `code`"),
        ({"source": "print(1)"}, "needs a JSON object with a string argument `code`"),
        (["print(1)"], "needs a JSON object with a string argument `code`"),
        ({"code": 42}, "argument `code` must be a string, got int"),
        ({"code": None}, "argument `code` must be a string, got NoneType"),
        ({"code": "x" * 70000}, "argument `code` has 70000 bytes, more than the limit of 65536"),
        ({"code": "```python\n\n```"}, "argument `code` is empty"),
    ],
)
def test_malformed_arguments_come_back_as_tool_errors(parameters, error):
    response, reward, metrics = _execute(_tool(), parameters)
    assert response.text.startswith("Error: ") and error in response.text
    assert (reward, metrics) == (0.0, {"status": "invalid_arguments"})


def test_format_result_joins_streams_and_names_the_problem():
    result = SandboxResult("memory", 119, "partial\n", "MemoryError\n", 0.5, "memory limit of 512 MB exceeded")
    assert format_result(result) == "partial\nMemoryError\n[memory: memory limit of 512 MB exceeded]"


def test_unknown_config_keys_are_rejected():
    with pytest.raises(ValueError, match=r"unknown keys \['rate_limit'\]"):
        _tool(rate_limit=128)


@pytest.mark.parametrize(
    "key, value, error",
    [
        ("timeout_s", "30", "wall_time_s must be a positive number"),
        ("memory_limit_mb", 0, "memory_mb must be a positive number"),
        ("max_output_bytes", -1, "max_output_bytes must be a positive number"),
        ("max_code_bytes", "64k", "max_code_bytes must be a positive integer"),
        ("max_concurrency", 0, "max_concurrency must be a positive integer"),
        ("queue_timeout_s", 0, "queue_timeout_s must be a positive number of seconds"),
        ("weak_sandbox_for_trusted_models_only", "false", "must be true or false, got 'false'"),
    ],
)
def test_bad_config_values_are_rejected(key, value, error):
    with pytest.raises(ValueError, match=error):
        _tool(**{key: value})


def test_the_old_weak_mode_key_is_refused_with_what_to_use_instead():
    with pytest.raises(ValueError, match="allow_weak_sandbox was removed: weak mode runs model code as the trainer's"):
        _tool(allow_weak_sandbox=False)
    with pytest.raises(ValueError, match="only for a model you trust, set weak_sandbox_for_trusted_models_only: true"):
        _tool(allow_weak_sandbox=True)


def test_backend_follows_the_config():
    local = _tool().backend
    assert isinstance(local, LocalSandbox) and not local.weak_sandbox_for_trusted_models_only
    local = _tool(weak_sandbox_for_trusted_models_only=True, queue_timeout_s=5, max_concurrency=2).backend
    assert (local.weak_sandbox_for_trusted_models_only, local.queue_timeout_s, local.max_concurrency) == (True, 5, 2)
    remote = _tool(sandbox_fusion_url="http://127.0.0.1:9/run_code", queue_timeout_s=7).backend
    assert isinstance(remote, SandboxFusionClient) and remote.queue_timeout_s == 7


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = {"status": "Success", "run_result": {"status": "Finished", "return_code": 0, "stdout": payload["code"]}}
        self.send_response(200)
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args):
        pass


def test_sandbox_fusion_backend_gets_the_prepared_code():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)  # echoes the code it receives
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        tool = _tool(sandbox_fusion_url=f"http://127.0.0.1:{server.server_address[1]}/run_code")
        assert _execute(tool, {"code": "```python\nx = 1\nx\n```"})[0].text == "x = 1\nprint(x)"
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(SandboxUnavailableError, match="unreachable"):  # verl turns this into the reply text
        _execute(tool, {"code": "print(1)"})


def test_tool_response_is_text_only():
    response, _, _ = _execute(_tool(), {"code": "print('hi')"})
    assert isinstance(response, ToolResponse) and response.is_text_only()

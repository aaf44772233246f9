"""verl tool `code_interpreter` (ReTool-style): runs model-written Python and returns its output.

Backend: the local sandbox (agents/sandbox.py) by default, or a SandboxFusion server when
`sandbox_fusion_url` is set. Bad arguments come back to the model as an error text; they never raise.
Tool config keys (agents/code_interpreter.yaml): see CONFIG_DEFAULTS.
"""

import ast
import re
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

from verl_recipes.agents.sandbox import QUEUE_TIMEOUT_S, LocalSandbox, SandboxLimits
from verl_recipes.agents.sandbox_fusion import SandboxFusionClient

CONFIG_DEFAULTS = {
    "type": "native",
    "sandbox_fusion_url": None,  # e.g. http://localhost:8080/run_code; None = local sandbox
    "max_concurrency": 8,  # runs at once per rollout worker process
    "queue_timeout_s": QUEUE_TIMEOUT_S,  # longest wait for a free slot; then the model gets a queue_timeout reply
    "timeout_s": 30,  # wall time; the CPU-time limit is the same
    "memory_limit_mb": 1024,  # the whole run
    "max_output_bytes": 8192,  # per stream, before verl's own multi_turn.max_tool_response_length
    "max_code_bytes": 64 * 1024,
    # Only for a model you trust, on a host without Linux namespaces: runs the code as the trainer's user on the
    # host, behind an audit hook that Python code can remove (agents/sandbox.py).
    "weak_sandbox_for_trusted_models_only": False,
}
REMOVED_KEYS = {
    "allow_weak_sandbox": (
        "weak mode runs model code as the trainer's user on the host, behind an audit hook that Python code can "
        "remove, so it is not a sandbox against an untrusted model: drop the key (namespace mode, the default) or "
        "set sandbox_fusion_url; only for a model you trust, set weak_sandbox_for_trusted_models_only: true"
    ),
}
FENCED_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str:
    """The first fenced ```python block if there is one, else the whole text."""
    match = FENCED_CODE.search(text)
    return (match.group(1) if match else text).strip("\n")


def print_last_expression(code: str) -> str:
    """Like a notebook cell: if the last statement is a bare expression (not print()), print it."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code  # the sandbox reports the syntax error to the model
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr):
        return code
    if isinstance(last.value, ast.Call) and isinstance(last.value.func, ast.Name) and last.value.func.id == "print":
        return code
    # ast offsets are in UTF-8 bytes
    lines = code.encode().split(b"\n")
    first, end = lines[last.lineno - 1], lines[last.end_lineno - 1]
    expression = ast.get_source_segment(code, last).encode()
    wrapped = first[: last.col_offset] + b"print(" + expression + b")" + end[last.end_col_offset :]
    return b"\n".join(lines[: last.lineno - 1] + [wrapped] + lines[last.end_lineno :]).decode()


def format_result(result) -> str:
    parts = [text.rstrip("\n") for text in (result.stdout, result.stderr) if text.strip()]
    if result.status != "ok":
        parts.append(f"[{result.status}: {result.message}]")
    return "\n".join(parts) if parts else "(no output)"


class CodeInterpreterTool(BaseTool):
    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None):
        super().__init__(config, tool_schema)
        for key in sorted(set(config) & set(REMOVED_KEYS)):
            raise ValueError(f"code_interpreter tool config: {key} was removed: {REMOVED_KEYS[key]}")
        unknown = sorted(set(config) - set(CONFIG_DEFAULTS))
        if unknown:
            allowed = sorted(CONFIG_DEFAULTS)
            raise ValueError(f"code_interpreter tool config: unknown keys {unknown}; allowed: {allowed}")
        cfg = {**CONFIG_DEFAULTS, **config}
        try:
            limits = SandboxLimits(
                wall_time_s=cfg["timeout_s"],
                cpu_time_s=cfg["timeout_s"],
                memory_mb=cfg["memory_limit_mb"],
                max_output_bytes=cfg["max_output_bytes"],
            )
        except ValueError as e:
            raise ValueError(f"code_interpreter tool config (timeout_s, memory_limit_mb, max_output_bytes): {e}") from e
        self.max_code_bytes = cfg["max_code_bytes"]
        if not isinstance(self.max_code_bytes, int) or self.max_code_bytes <= 0:
            value = self.max_code_bytes
            raise ValueError(f"code_interpreter tool config: max_code_bytes must be a positive integer, got {value!r}")
        weak = cfg["weak_sandbox_for_trusted_models_only"]
        if not isinstance(weak, bool):
            key = "weak_sandbox_for_trusted_models_only"
            raise ValueError(f"code_interpreter tool config: {key} must be true or false, got {weak!r}")
        runner = (limits, cfg["max_concurrency"], cfg["queue_timeout_s"])
        if cfg["sandbox_fusion_url"]:
            self.backend = SandboxFusionClient(cfg["sandbox_fusion_url"], *runner)
        else:
            self.backend = LocalSandbox(*runner, weak_sandbox_for_trusted_models_only=weak)

    def _argument_error(self, parameters) -> str | None:
        if not isinstance(parameters, dict) or "code" not in parameters:
            return "code_interpreter needs a JSON object with a string argument `code` holding the Python code"
        code = parameters["code"]
        if not isinstance(code, str):
            return f"argument `code` must be a string, got {type(code).__name__}"
        if len(code.encode()) > self.max_code_bytes:
            return f"argument `code` has {len(code.encode())} bytes, more than the limit of {self.max_code_bytes}"
        if not extract_code(code).strip():
            return "argument `code` is empty"
        return None

    @rollout_trace_op
    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        error = self._argument_error(parameters)
        if error:
            return ToolResponse(text=f"Error: {error}."), 0.0, {"status": "invalid_arguments"}
        code = print_last_expression(extract_code(parameters["code"]))
        result = await self.backend.run_async(code)  # infrastructure failures raise SandboxUnavailableError
        metrics = {"status": result.status, "wall_time_s": result.wall_time_s}
        return ToolResponse(text=format_result(result)), 0.0, metrics

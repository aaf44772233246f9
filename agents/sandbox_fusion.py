"""Client for a SandboxFusion server (https://bytedance.github.io/SandboxFusion/), the remote
alternative to the local sandbox. It returns the same SandboxResult as verl_recipes.agents.sandbox.LocalSandbox.

API: POST <url> (the full `/run_code` endpoint) with JSON
{"code", "language": "python", "run_timeout", "memory_limit_MB"}; the answer carries "status"
(Success | Failed | SandboxError) and "run_result" {"status", "stdout", "stderr", "return_code"}.
"""

import json
import time
import urllib.error
import urllib.request

from verl_recipes.agents.sandbox import (
    QUEUE_TIMEOUT_S,
    BoundedRunner,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
)

API_SLACK_S = 10.0  # the server's own queueing and start-up, on top of run_timeout
MAX_RESPONSE_BYTES = 16 * 2**20  # never buffer an unbounded answer (the code may print gigabytes)
START_HINT = (
    "start it with `docker run -d -p 8080:8080 volcengine/sandbox-fusion:server-20250609` "
    "or unset sandbox_fusion_url to use the local sandbox"
)


def _truncate(text, limit):
    data = str(text or "").encode("utf-8", errors="replace")
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit


class SandboxFusionClient(BoundedRunner):
    def __init__(
        self,
        url: str,
        limits: SandboxLimits = SandboxLimits(),
        max_concurrency: int = 8,
        queue_timeout_s: float = QUEUE_TIMEOUT_S,
    ):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            example = "http://localhost:8080/run_code"
            raise ValueError(f"sandbox_fusion_url must be an http(s) URL such as {example}, got {url!r}")
        super().__init__(limits, max_concurrency, queue_timeout_s)
        self.url = url

    def _post(self, payload):
        request = urllib.request.Request(
            self.url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.limits.wall_time_s + API_SLACK_S) as response:
                return response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as e:
            hint = " (the URL must be the /run_code endpoint)" if e.code == 404 else ""
            body = e.read(300).decode(errors="replace")
            raise SandboxUnavailableError(f"SandboxFusion at {self.url} answered HTTP {e.code}{hint}: {body}") from e
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise SandboxUnavailableError(f"SandboxFusion at {self.url} unreachable: {reason}; {START_HINT}") from e

    def _run_once(self, code):
        start = time.monotonic()
        payload = {
            "code": code,
            "language": "python",
            "run_timeout": self.limits.wall_time_s,
            "memory_limit_MB": self.limits.memory_mb,
        }
        body = self._post(payload)
        wall_time = round(time.monotonic() - start, 3)
        if len(body) > MAX_RESPONSE_BYTES:
            message = f"SandboxFusion answer exceeded {MAX_RESPONSE_BYTES} bytes"
            return SandboxResult("output_truncated", None, "", "", wall_time, message)
        try:
            answer = json.loads(body)
        except ValueError:
            message = f"SandboxFusion at {self.url} returned invalid JSON: {body[:200]!r}"
            raise SandboxUnavailableError(message) from None
        run = answer.get("run_result") if isinstance(answer, dict) else None
        if isinstance(answer, dict) and answer.get("status") == "SandboxError":
            raise SandboxUnavailableError(f"SandboxFusion at {self.url} reported SandboxError: {answer.get('message')}")
        if not isinstance(run, dict):
            raise SandboxUnavailableError(f"SandboxFusion at {self.url} returned no run_result: {body[:200]!r}")
        return self._result(run, wall_time)

    def _result(self, run, wall_time):
        stdout, stdout_cut = _truncate(run.get("stdout"), self.limits.max_output_bytes)
        stderr, stderr_cut = _truncate(run.get("stderr"), self.limits.max_output_bytes)
        exit_code = run.get("return_code")
        exit_code = exit_code if isinstance(exit_code, int) else None
        run_status = run.get("status")
        if stdout_cut or stderr_cut:
            status, message = "output_truncated", f"output exceeded {self.limits.max_output_bytes} bytes"
        elif run_status == "TimeLimitExceeded":
            status, message = "timeout", f"wall time limit of {self.limits.wall_time_s} s exceeded"
        elif run_status == "Finished" and exit_code == 0:
            status, message = "ok", ""
        elif stderr.rstrip().endswith("MemoryError"):
            status, message = "memory", f"memory limit of {self.limits.memory_mb} MB exceeded"
        else:
            status, message = "error", f"run status {run_status}, exit code {exit_code}"
        return SandboxResult(status, exit_code, stdout, stderr, wall_time, message)

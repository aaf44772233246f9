"""The SandboxFusion client (agents/sandbox_fusion.py) against a fake server on 127.0.0.1."""

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verl_recipes.agents.sandbox import SandboxLimits, SandboxUnavailableError
from verl_recipes.agents.sandbox_fusion import SandboxFusionClient

LIMITS = SandboxLimits(wall_time_s=2.0, memory_mb=512, max_output_bytes=100)


def _run_result(status="Finished", stdout="", stderr="", return_code=0):
    return {
        "status": "Success" if status == "Finished" and return_code == 0 else "Failed",
        "message": "",
        "compile_result": None,
        "run_result": {
            "status": status,
            "execution_time": 0.01,
            "return_code": return_code,
            "stdout": stdout,
            "stderr": stderr,
        },
    }


class FakeSandboxFusion(BaseHTTPRequestHandler):
    """Answers each POST with `server.reply(payload) -> (http_status, body bytes)`."""

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, payload))
        status, body = self.server.reply(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeSandboxFusion)
    httpd.requests = []
    httpd.reply = lambda payload: (200, json.dumps(_run_result(stdout="ok\n")).encode())
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}/run_code"
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_request_follows_the_run_code_api(server):
    result = SandboxFusionClient(server.url, LIMITS).run("print('ok')")
    assert server.requests == [
        ("/run_code", {"code": "print('ok')", "language": "python", "run_timeout": 2.0, "memory_limit_MB": 512})
    ]
    assert (result.status, result.exit_code, result.stdout, result.stderr) == ("ok", 0, "ok\n", "")


@pytest.mark.parametrize(
    "answer, status, message",
    [
        (_run_result(stdout="42\n"), "ok", ""),
        (_run_result("Finished", stderr="Traceback\nZeroDivisionError", return_code=1), "error", "exit code 1"),
        (_run_result("TimeLimitExceeded", stdout="partial"), "timeout", "wall time limit of 2.0 s exceeded"),
        (_run_result("Finished", stderr="Traceback\nMemoryError\n", return_code=1), "memory", "memory limit"),
        (_run_result("Error", stderr="killed", return_code=-9), "error", "run status Error"),
        (_run_result(stdout="x" * 1000), "output_truncated", "output exceeded 100 bytes"),
    ],
)
def test_run_results_map_to_sandbox_statuses(server, answer, status, message):
    server.reply = lambda payload: (200, json.dumps(answer).encode())
    result = SandboxFusionClient(server.url, LIMITS).run("pass")
    assert result.status == status and message in result.message
    assert len(result.stdout) <= LIMITS.max_output_bytes


@pytest.mark.parametrize(
    "http_status, body, error",
    [
        (200, b"<html>not json</html>", "returned invalid JSON"),
        (200, b'{"status": "Success"}', "returned no run_result"),
        (200, b"[1, 2]", "returned no run_result"),
        (200, json.dumps({"status": "SandboxError", "message": "pod crashed"}).encode(), "SandboxError: pod crashed"),
        (500, b"internal error", "answered HTTP 500: internal error"),
        (404, b"not found", "the URL must be the /run_code endpoint"),
    ],
)
def test_garbage_from_the_server_raises_a_clear_error(server, http_status, body, error):
    server.reply = lambda payload: (http_status, body)
    with pytest.raises(SandboxUnavailableError, match=error) as raised:
        SandboxFusionClient(server.url, LIMITS).run("pass")
    assert server.url in str(raised.value)


def test_unreachable_server_says_how_to_fix_it():
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/run_code"
    with pytest.raises(SandboxUnavailableError, match="unreachable.*unset sandbox_fusion_url"):
        SandboxFusionClient(url, LIMITS).run("pass")


def test_concurrency_limit_holds(server):
    active, peak, lock = [0], [0], threading.Lock()

    def slow_reply(payload):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return 200, json.dumps(_run_result(stdout="done")).encode()

    server.reply = slow_reply
    client = SandboxFusionClient(server.url, LIMITS, max_concurrency=2)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(client.run, ["pass"] * 8))
    assert [r.stdout for r in results] == ["done"] * 8
    assert peak[0] == 2


@pytest.mark.parametrize("url", ["localhost:8080/run_code", "", None, "ftp://host/run_code"])
def test_bad_url_is_rejected(url):
    with pytest.raises(ValueError, match="sandbox_fusion_url must be an http"):
        SandboxFusionClient(url)

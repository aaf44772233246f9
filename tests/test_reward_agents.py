"""verl_recipes.rewards.retool (tool-use shaping) and verl_recipes.rewards.deepeyes (rules and LLM judge against a local server)."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from verl_recipes.rewards import deepeyes, retool
from verl_recipes.rewards.deepeyes import answers_match, final_answer
from verl_recipes.rewards.grading import grade


@pytest.fixture(scope="module", autouse=True)
def started_grader():
    """Time bounds hold once the grader pool has started (a one-off ~1 s per process)."""
    grade("\\frac12", "0.5")


CODE_TURN = (
    "Let me compute it.\n<tool_call>\n"
    '{"name": "code_interpreter", "arguments": {"code": "print(sum(range(1, 101)))"}}\n</tool_call>'
    "user\n<tool_response>\n5050\n</tool_response>\nassistant\n"
)


# ---------------------------------------------------------------- retool


@pytest.mark.parametrize(
    ("response", "ground_truth", "num_turns", "score"),
    [
        (CODE_TURN + "So the sum is \\boxed{5050}.", "5050", 4, 1.0),
        ("The sum is \\boxed{5050}.", "5050", 2, 1.0),
        ("AIME answers are integers: \\boxed{033}", "33", 2, 1.0),
        ("The sum is \\boxed{5000}.", "5050", 2, -1.0),
        ("The sum is \\boxed{5000}.", "5050", 4, -0.9),
        ("The sum is \\boxed{5000}.", "5050", np.int32(6), -0.8),
        ("The sum is \\boxed{5000}.", "5050", 10, -0.6),
        ("The sum is \\boxed{5000}.", "5050", 30, -0.6),  # the bonus is capped
        ("The sum is 5050.", "5050", 2, -1.0),  # strict: unboxed is wrong
    ],
)
def test_retool_rewards_correctness_and_tool_use(response, ground_truth, num_turns, score):
    result = retool.compute_score("aime2024", response, ground_truth, extra_info={"num_turns": num_turns})
    assert result["score"] == pytest.approx(score)
    assert result["acc"] == float(score == 1.0)
    assert result["turns"] == float(num_turns)


@pytest.mark.parametrize(("tool_rounds", "score"), [(0, -1.0), (1, -0.9), (2, -0.8), (10, -0.6)])
def test_retool_counts_tool_calls_when_the_reward_manager_gives_no_num_turns(tool_rounds, score):
    # verl's dapo reward manager does not put num_turns into extra_info
    response = CODE_TURN * tool_rounds + "\\boxed{1}"
    result = retool.compute_score("aime2024", response, "5050", extra_info={"index": 0})
    assert result["score"] == pytest.approx(score)
    assert result["turns"] == 2 + 2 * tool_rounds


@pytest.mark.slow
def test_retool_hostile_answer_is_bounded_and_wrong():
    start = time.monotonic()
    result = retool.compute_score("aime2024", "\\boxed{9^{9^{9^{9}}}}", "9", extra_info={"num_turns": 2})
    assert time.monotonic() - start < 5.0
    assert result["score"] == -1.0


# ---------------------------------------------------------------- deepeyes rules

ZOOM_TURN = (
    "<think>The sign is too small to read; zoom in.</think>\n<tool_call>\n"
    '{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [226, 399, 265, 464]}}\n</tool_call>'
    "user\n<tool_response>\n(zoomed image)\n</tool_response>\nassistant\n"
)


@pytest.mark.parametrize(
    ("answer", "ground_truth", "match"),
    [
        ("Tan.", "tan", True),
        ("the left side", "left side", True),
        ("left", "right", False),
        ("B", "B", True),
        ("(B) the red car", "B", True),
        ("B. red car", "(B)", True),
        ("b", "B", True),
        ("C", "B", False),
        ("Both A and B", "B", False),
        ("3", "3", True),
        ("There are 3 cups.", "3", True),
        ("3.0", "3", True),
        ("1,000", "1000", True),
        ("2 or 3", "3", False),
        ("4", "3", False),
        ("Yes, the man is holding the camera.", "yes", True),
        ("No.", "yes", False),
        ("The countertop is tan.", "tan", True),  # a short ground truth inside a short sentence
        ("The countertop is not tan.", "tan", False),
        ("The countertop is tan, the wall is white and the floor is grey with blue tiles near the door.", "tan", False),
        ("0.5", "1/2", True),  # fractions and decimals
        ("1/2", "0.5", True),
        ("It is 3/4 of the way.", "0.75", True),
        ("2/3", "0.5", False),
        ("Yes, it is.", "yes", True),
        ("yes", "Yes, it is.", True),
        ("No, it is not.", "Yes, it is.", False),
        ("B", "(B) the red car", True),  # option letters with their text
        ("the red car", "(B) the red car", True),
        ("C", "B. the red car", False),
    ],
)
def test_rule_based_answer_matching(answer, ground_truth, match):
    assert answers_match(answer, ground_truth) is match


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("<think>..</think><answer> B </answer>", "B"),
        ("<answer>A</answer> then <answer>B</answer>", "B"),
        ("<answer>B", None),
        ("B</answer>", None),
        ("<answer></answer>", None),
        ("<answer>" + "B" * 1000 + "</answer>", None),  # judge hacking by length
    ],
)
def test_final_answer(response, answer):
    assert final_answer(response) == answer


# (response, extra_info, acc, format, tool_bonus, score)
DEEPEYES = [
    (ZOOM_TURN + "<think>It reads STOP.</think><answer>B</answer>", {}, 1.0, 1.0, 1.0, 2.0),
    ("<think>Clearly red.</think><answer>B</answer>", {}, 1.0, 1.0, 0.0, 0.8),
    ("<think>Clearly red.</think><answer>B</answer>", {"num_turns": np.int32(4)}, 1.0, 1.0, 1.0, 2.0),
    (ZOOM_TURN + "<think>It reads GO.</think><answer>C</answer>", {}, 0.0, 1.0, 0.0, 0.0),
    ("<think>A or B</think><answer>A</answer><answer>B</answer>", {}, 1.0, 0.0, 0.0, 0.6),
    (ZOOM_TURN + "<tool_call>{<answer>B</answer>", {}, 1.0, 0.0, 1.0, 1.8),
    ("<think>unclosed <answer>B</answer>", {}, 1.0, 0.0, 0.0, 0.6),
    ("<think>no answer tag</think> B", {}, 0.0, 0.0, 0.0, -0.2),
]


@pytest.mark.parametrize(("response", "extra_info", "acc", "well_formed", "tool_bonus", "score"), DEEPEYES)
def test_deepeyes_rule_based_score(response, extra_info, acc, well_formed, tool_bonus, score):
    result = deepeyes.compute_score("deepeyes", response, "B", extra_info=extra_info)
    assert (result["acc"], result["format"], result["tool_bonus"]) == (acc, well_formed, tool_bonus)
    assert result["score"] == pytest.approx(score)
    assert result["judged"] == 0.0


@pytest.mark.parametrize(
    "response",
    ["<answer>" * 200_000, "<tool_call>" * 100_000 + "<answer>B</answer>", "x" * 1_000_000 + "<answer>B</answer>"],
    ids=["200k open tags", "100k tool calls", "1MB junk"],
)
def test_deepeyes_hostile_responses_are_fast(response):
    start = time.monotonic()
    deepeyes.compute_score("deepeyes", response, "B")
    assert time.monotonic() - start < 5.0


# ---------------------------------------------------------------- deepeyes LLM judge


class _Judge(BaseHTTPRequestHandler):
    """Fake OpenAI-compatible server; the test sets `reply` (text, or int for an HTTP error) and `delay_s`."""

    reply: str | int = "CORRECT"
    delay_s = 0.0
    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        time.sleep(self.delay_s)
        if isinstance(self.reply, int):
            self.send_error(self.reply)
            return
        payload = self.reply
        if not payload.startswith("RAW:"):
            payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": self.reply}}]})
        data = payload.removeprefix("RAW:").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except BrokenPipeError:
            pass  # the client gave up waiting (the slow-judge test)

    def log_message(self, *args):
        pass


@pytest.fixture
def judge():
    class Judge(_Judge):
        requests = []

    server = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield Judge, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _judged(url, response, ground_truth="tan", **kwargs):
    extra_info = {"question": "Is the countertop tan or blue?"}
    return deepeyes.compute_score_judge(
        "deepeyes", response, ground_truth, extra_info=extra_info, judge_url=url, judge_model="judge-72b", **kwargs
    )


def test_judge_verdict_is_used_and_request_is_well_formed(judge):
    server, url = judge
    result = _judged(url, "<think>look</think><answer>The countertop is tan.</answer>")
    assert (result["acc"], result["judged"], result["score"]) == (1.0, 1.0, 0.8)
    [(path, body)] = server.requests
    assert path == "/v1/chat/completions"
    assert body["model"] == "judge-72b"
    prompt = body["messages"][-1]["content"]
    assert "Is the countertop tan or blue?" in prompt and "The countertop is tan." in prompt and "tan" in prompt


def test_judge_can_overrule_the_rules(judge):
    server, url = judge
    server.reply = "INCORRECT"
    result = _judged(url, "<think>look</think><answer>tan</answer>")
    assert (result["acc"], result["judged"]) == (0.0, 1.0)


@pytest.mark.parametrize(
    "reply", ["Maybe?", "CORRECT or INCORRECT", "RAW:not json", "RAW:{}", 'RAW:{"choices": []}', 500, 404]
)
def test_judge_garbage_falls_back_to_rules(judge, reply):
    server, url = judge
    server.reply = reply
    result = _judged(url, "<think>look</think><answer>Tan</answer>")
    assert (result["acc"], result["judged"]) == (1.0, 0.0)


def test_slow_judge_times_out_to_rules(judge):
    server, url = judge
    server.delay_s = 3.0
    start = time.monotonic()
    result = _judged(url, "<think>look</think><answer>blue</answer>", judge_timeout_s=0.5)
    assert time.monotonic() - start < 2.0
    assert (result["acc"], result["judged"]) == (0.0, 0.0)


def test_unreachable_judge_falls_back_to_rules():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = _judged(f"http://127.0.0.1:{port}/v1", "<think>look</think><answer>tan</answer>")
    assert (result["acc"], result["judged"]) == (1.0, 0.0)


def test_judge_is_not_asked_without_an_answer(judge):
    server, url = judge
    result = _judged(url, "<think>I cannot tell.</think>")
    assert (result["acc"], result["judged"]) == (0.0, 0.0)
    assert server.requests == []


def test_judge_settings_come_from_env(judge, monkeypatch):
    server, url = judge
    monkeypatch.setenv("LLM_AS_A_JUDGE_BASE", url)
    monkeypatch.setenv("LLM_AS_A_JUDGE_MODEL", "env-judge")
    result = deepeyes.compute_score_judge("deepeyes", "<answer>The countertop is tan.</answer>", "tan")
    assert result["judged"] == 1.0
    assert server.requests[0][1]["model"] == "env-judge"


def test_judge_without_settings_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("LLM_AS_A_JUDGE_BASE", raising=False)
    monkeypatch.delenv("LLM_AS_A_JUDGE_MODEL", raising=False)
    with pytest.raises(ValueError, match="judge_url and judge_model"):
        deepeyes.compute_score_judge("deepeyes", "<answer>tan</answer>", "tan")


# ---------------------------------------------------------------- verl contract


@pytest.mark.parametrize(
    ("path", "name", "kwargs"),
    [
        ("pkg://verl_recipes.rewards.retool", "compute_score", {}),
        ("pkg://verl_recipes.rewards.deepeyes", "compute_score", {}),
        ("pkg://verl_recipes.rewards.deepeyes", "compute_score_judge", {"judge_url": "http://127.0.0.1:9/v1", "judge_model": "m"}),
    ],
)
def test_loads_the_way_verl_does_and_returns_numbers(path, name, kwargs):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    reward_config = {"path": path, "name": name, "reward_kwargs": kwargs}
    reward_fn = get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": reward_config}}))
    responses = [CODE_TURN + "\\boxed{B} <answer>B</answer>", "nothing", ZOOM_TURN + "<answer>C</answer>"]
    results = [
        reward_fn(data_source="x", solution_str=response, ground_truth="B", extra_info={"num_turns": np.int32(4)})
        for response in responses
    ]
    assert all(result.keys() == results[0].keys() for result in results)
    assert all(isinstance(value, float) for result in results for value in result.values())


def test_judge_variant_asks_the_reward_model_verl_serves(judge):
    """VARIANT=judge: verl's reward loop calls the configured function with the router of the judge it serves
    (experimental/reward_loop/reward_manager/naive.py passes reward_router_address); the function posts there."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from verl_recipes import catalog
    from verl_recipes.compose import compose

    server, url = judge
    cfg = compose(catalog.get("deepeyes-qwen25-vl-7b", variant="judge"))
    assert cfg.reward.reward_model.enable and cfg.reward.custom_reward_function.name == "compute_score_judge"
    reward_fn = get_custom_reward_fn(cfg)  # what verl loads, with the recipe's reward kwargs bound
    router = url.removeprefix("http://").removesuffix("/v1")
    result = reward_fn(data_source="vstar", solution_str="<think>look</think><answer>tan</answer>", ground_truth="tan",
                       extra_info={"question": "Is the countertop tan?"}, reward_router_address=router,
                       reward_model_tokenizer=None)
    assert (result["acc"], result["judged"]) == (1.0, 1.0)
    path, body = server.requests[-1]
    assert path == "/v1/chat/completions" and body["model"] == "Qwen/Qwen2.5-72B-Instruct"

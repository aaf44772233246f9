"""The bench's response lengths at verl's rollout servers (verl_recipes/runtime/forced_lengths.py): every request asks
its server for its drawn length (max_tokens, ignore_eos), on stand-ins with the servers' generate signature, and
verl 0.9.1's own vLLM and SGLang servers read those keys where the wrapper puts them. That verl loads the wrapper only
when the variable is set: tests/test_faults.py, beside the other plugins'."""

import ast
import asyncio
import importlib.util
import types
from pathlib import Path

import numpy as np
import pytest

from verl_recipes.bench import e2e_arms, e2e_inputs, lengths, model_shape
from verl_recipes.catalog import REPO
from verl_recipes.check.gates import read_metrics
from verl_recipes.compose import compose
from verl_recipes.runtime import forced_lengths
from verl_recipes.runtime.response_lengths import ForcedLengths

RESPONSE_LENGTH = 2048


class Server:
    """What verl's servers' generate sees of its arguments: it returns the sampling params it was given."""

    config = types.SimpleNamespace(response_length=RESPONSE_LENGTH)

    async def generate(self, prompt_ids, sampling_params, request_id, image_data=None, priority=0):
        return dict(sampling_params), image_data, priority


def patched() -> Server:
    """A fresh stand-in class per test (the wrapper keeps one ForcedLengths per class it wraps, as per server)."""
    module = types.SimpleNamespace(__name__=next(iter(forced_lengths.SERVERS)))
    setattr(module, forced_lengths.SERVERS[module.__name__], type("vLLMHttpServer", (Server,), {}))
    forced_lengths.patch(module)
    forced_lengths.patch(module)  # the plugin loaded twice in one process: wrapped once
    return getattr(module, forced_lengths.SERVERS[module.__name__])()


def ask(server, prompt, params, **kwargs):
    return asyncio.run(server.generate(prompt, params, "req-0", **kwargs))


def test_each_request_asks_for_its_drawn_length_and_keeps_its_other_params():
    server, reference = patched(), ForcedLengths()
    caller = {"temperature": 1.0, "top_p": 0.9, "logprobs": True}
    for _ in range(5):  # a GRPO group: five requests with one prompt
        params, image, priority = ask(server, [5, 6, 7], caller, image_data=["img"], priority=3)
        assert params == {**caller, "max_tokens": reference.target([5, 6, 7], RESPONSE_LENGTH), "ignore_eos": True}
        assert (image, priority) == (["img"], 3)  # what follows request_id passes through
    assert caller == {"temperature": 1.0, "top_p": 0.9, "logprobs": True}  # the caller's dict is not edited


@pytest.mark.parametrize("given,cap", [({"max_tokens": 300}, 300), ({"max_new_tokens": 40}, 40),
                                       ({"max_new_tokens": 40, "max_tokens": 300}, 40), ({}, RESPONSE_LENGTH)])
def test_a_cap_the_caller_set_stays_the_cap_and_sglangs_key_is_read_too(given, cap):
    server = patched()
    asked = [ask(server, [i % 50, 1], dict(given))[0] for i in range(400)]
    assert all(set(params) == {"max_tokens", "ignore_eos"} for params in asked)  # one key, the one both servers read
    got = np.array([params["max_tokens"] for params in asked])
    assert got.max() == cap and 1 <= got.min() and (got == cap).mean() >= lengths.TRUNCATED_FRACTION / 2


def test_the_lengths_follow_the_bench_distribution_through_the_server():
    server = patched()
    got = np.array([ask(server, [i, i + 1], {})[0]["max_tokens"] for i in range(400) for _ in range(5)])
    target = lengths.sample(20000, max_response=RESPONSE_LENGTH, seed=1).responses
    assert abs(np.median(got) / np.median(target) - 1) < 0.1
    assert abs((got == RESPONSE_LENGTH).mean() - (target == RESPONSE_LENGTH).mean()) < 0.04


def _generate(module: str, cls: str) -> ast.AsyncFunctionDef:
    """verl 0.9.1's server class's generate, read from its source (importing it would need vLLM or SGLang)."""
    path = Path(importlib.util.find_spec("verl").origin).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text())
    found = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == cls)
    return next(node for node in found.body if isinstance(node, ast.AsyncFunctionDef) and node.name == "generate")


@pytest.mark.parametrize("module", list(forced_lengths.SERVERS))
def test_verls_servers_take_the_arguments_the_wrapper_passes_and_read_its_keys(module):
    generate = _generate(module, forced_lengths.SERVERS[module])
    assert [arg.arg for arg in generate.args.args[:4]] == ["self", "prompt_ids", "sampling_params", "request_id"]
    read = {node.args[0].value for node in ast.walk(generate) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr in ("pop", "setdefault", "get")
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "sampling_params"
            and node.args and isinstance(node.args[0], ast.Constant)}
    assert "max_tokens" in read  # the length; ignore_eos goes through in the dict to the engine's SamplingParams


def test_the_bench_and_the_node_runs_hand_the_variable_to_rays_workers_as_a_string():
    from verl_recipes.node import overrides

    cfg = compose(e2e_arms.config_of("ours", "qwen25-7b-grpo"),
                  e2e_arms.bench_args("ours", Path("/m"), [Path("/d/train.parquet"), Path("/d/test.parquet")], 3, 64, 16))
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars[forced_lengths.LENGTHS_ENV] == "1"  # Ray takes only str
    key = f"ray_kwargs.ray_init.runtime_env.env_vars.{forced_lengths.LENGTHS_ENV}"
    assert overrides.table()["run"][key]["value"] == "1"


# one-GPU runs of the bench with today's inputs (the 2026-11-26 runs had other prompts), all under the logits processor
COMMITTED = ["e2e.ours.w1.2xh200.2026-11-28", "e2e.ours_liger.2xh200.2026-11-28", "e2e.verl_example.h200.2026-11-29",
             "e2e.ours_levers.h200.2026-11-29"]


@pytest.mark.slow  # the tokenizer of the 1.5B vocabulary and 192 chat templates: ~3 s
def test_a_server_asks_for_the_lengths_the_logits_processor_forced_in_the_committed_runs(tmp_path):
    """The bench's 192 prompts, 5 samples each, as verl's agent loop sends them (the chat template's ids), through one
    server: the same keys, so the same lengths as the processor realised, to the token, over each whole run."""
    from transformers import AutoTokenizer

    model_shape.write("qwen2.5-1.5b", tmp_path, weights=False)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    server = ForcedLengths()
    asked = [server.target(tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                                   return_dict=False), RESPONSE_LENGTH)
             for row in e2e_inputs.rows("train", 3 * 64, seed=0) for _ in range(5)]
    for run in COMMITTED:
        steps = [row["response_length/mean"] for row in read_metrics(REPO / f"bench/results/{run}.metrics.jsonl").values()]
        assert len(steps) == 3 and sum(asked) == round(sum(steps) * 5 * 64), run

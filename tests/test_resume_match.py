"""Issue 45's exact resume (tests/gpu/resume_match.py): a relaunch's first step against the uninterrupted run's, on
metrics files as verl's file logger writes them. The values follow the committed tiny smoke of qwen25-7b-grpo
(results/smoke/qwen25-7b-grpo-v1.tiny-h200.metrics.jsonl: score ~0.17, responses ~100 tokens of 128, a bf16 entropy
of 6.8125, lr 1e-6, KL coefficient 0.001, the rollout-trainer KL ~0.044) over the six steps of a reference run."""

import importlib.util
import json
import random
import sys

import pytest

from verl_recipes.catalog import REPO

_spec = importlib.util.spec_from_file_location("resume_match", REPO / "tests" / "gpu" / "resume_match.py")
rm = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = rm
_spec.loader.exec_module(rm)

PROMPTS = {1: (54.0, 54.0, 54.0), 2: (53.75, 54.0, 53.0), 3: (52.5, 55.0, 51.0), 4: (54.25, 56.0, 53.0),
           5: (53.0, 54.0, 52.0), 6: (55.5, 57.0, 54.0), 7: (53.5, 55.0, 52.0)}  # the data position: each step's prompts, by length


def step_metrics(step: int, rng: random.Random) -> dict:
    """One step as verl logs it, sampling drawn from `rng` (a run's seed)."""
    mean, top, low = PROMPTS[step]
    return {"training/global_step": step, "training/epoch": 0, "prompt_length/mean": mean, "prompt_length/max": top,
            "prompt_length/min": low, "actor/lr": 1e-6, "actor/kl_coef": 0.001,
            "critic/score/mean": 0.17 + rng.gauss(0, 0.02), "response_length/mean": 102 + rng.gauss(0, 4),
            "actor/entropy": 6.8125, "actor/pg_loss": -0.1 + rng.gauss(0, 0.04),
            "actor/grad_norm": 0.66 + rng.gauss(0, 0.03), "actor/kl_loss": 2e-6 * (step - 1) ** 2 + abs(rng.gauss(0, 3e-7)) * (step > 1),
            "rollout_corr/kl": 0.0437 + rng.gauss(0, 2e-4), "timing_s/step": 3.0 + rng.random()}


def write_steps(path, steps: dict[int, dict], partial: bool = False):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": s, "data": d}) + "\n" for s, d in sorted(steps.items())]
    path.write_text("".join(lines) + ('{"step": 9, "da' if partial else ""))


def run(seed: int, first: int = 1, last: int = 6) -> dict[int, dict]:
    rng = random.Random(seed)
    return {s: step_metrics(s, rng) for s in range(first, last + 1)}


def suite_out(tmp_path, relaunch: dict[int, dict], checkpoint: str = "global_step_2", own=None, other=None,
              steps: int = 6, mode: str = "colocated"):
    """DIR as faults.py leaves it: the reference record, its two runs, a fault record and its relaunch's metrics."""
    suffix = "" if mode == "colocated" else f"-{mode}"
    metrics = {"own": f"reference.{mode}.s42.jsonl", "other": f"reference.{mode}.s43.jsonl"}
    write_steps(tmp_path / "metrics" / metrics["own"], run(42) if own is None else own)
    write_steps(tmp_path / "metrics" / metrics["other"], run(43) if other is None else other)
    recipe = "qwen25-7b-grpo" if mode == "colocated" else "qwen25-7b-grpo:separate_async"
    (tmp_path / f"reference{suffix}.json").write_text(json.dumps(
        {"mode": mode, "recipe": recipe, "hardware": "1 x NVIDIA H100 80GB HBM3 (GPU 0 of 1)", "date": "2026-12-07",
         "seeds": {"own": 42, "other": 43}, "steps": steps, "metrics": metrics}))
    write_steps(tmp_path / "metrics" / "faults.colocated.vllm_engine.trainer_worker.1.jsonl", relaunch)
    (tmp_path / f"vllm_engine{suffix}.json").write_text(json.dumps(
        {"fault": "vllm_engine", "mode": mode, "recipe": recipe, "resumed": True, "checkpoint": checkpoint,
         "relaunch_metrics": "faults.colocated.vllm_engine.trainer_worker.1.jsonl"}))
    return tmp_path


def resumed_at(step: int, seed: int = 7, **changes) -> dict[int, dict]:
    """A relaunch from global_step_<step - 1> that trained `step` and the next: a fresh sampling stream."""
    steps = run(seed, first=step, last=step + 1)
    steps[step].update(changes)
    return steps


def test_a_relaunch_that_restored_everything_passes(tmp_path):
    rec = rm.match(suite_out(tmp_path, resumed_at(3)), "colocated")
    assert rec["passed"], rec["failures"]
    (p,) = rec["points"]
    assert p["fault"] == "vllm_engine" and p["step"] == 3 and p["failures"] == []
    assert set(p["exact"]) == set(rm.EXACT) and set(p["noisy"]) == set(rm.NOISY)
    assert rec["noise"]["critic/score/mean"]["df"] == 5 and rec["noise"]["critic/score/mean"]["t"] == 6.869
    assert p["noisy"]["actor/entropy"]["noise"] == 0.0  # bf16: both references logged 6.8125; the floor allows 1 %


@pytest.mark.parametrize("changes,why", [
    ({"prompt_length/mean": 54.0, "prompt_length/max": 54.0, "prompt_length/min": 54.0},
     "prompt_length/mean 54.0 != 52.5"),  # the data position not restored: step 1's prompts again
    ({"actor/lr": 0.0}, "actor/lr 0.0 != 1e-06"),  # the lr schedule restarted (a warm-up from 0)
    ({"actor/kl_loss": 0.0}, "actor/kl_loss 0 is"),  # the actor is the reference again: its weights not loaded
    ({"rollout_corr/kl": 0.9}, "rollout_corr/kl 0.9 is"),  # vLLM serves other weights than the actor's
])
def test_each_thing_a_resume_can_lose_fails_by_name(tmp_path, changes, why):
    rec = rm.match(suite_out(tmp_path, resumed_at(3, **changes)), "colocated")
    assert not rec["passed"]
    assert [f for f in rec["failures"] if why in f] and rec["failures"][0].startswith("vllm_engine (step 3): ")


def test_a_relaunch_that_started_over_or_a_reference_too_short_fails(tmp_path):
    rec = rm.match(suite_out(tmp_path, run(7, last=2)), "colocated")  # trained step 1 again, not 3
    assert rec["failures"] == ["vllm_engine (step 1): the relaunch's first logged step is 1, not 3 (the one after "
                               "global_step_2)"]
    rec = rm.match(suite_out(tmp_path / "short", resumed_at(6), checkpoint="global_step_5", own=run(42, last=5),
                             other=run(43, last=5), steps=5), "colocated")
    assert rec["failures"] == ["vllm_engine (step 6): the reference has no step 6: run `faults.py reference` with "
                               "--steps 6 or more"]


def test_references_that_disagree_on_the_data_or_stop_early_prove_nothing(tmp_path):
    other = run(43)
    other[4]["prompt_length/mean"] = 55.0  # their data order depends on the sampling seed
    rec = rm.match(suite_out(tmp_path, resumed_at(3), other=other), "colocated")
    assert any("the references differ at step 4 on prompt_length/mean" in f for f in rec["failures"])
    rec = rm.match(suite_out(tmp_path / "cut", resumed_at(3), other=run(43, last=2)), "colocated")
    assert any("the other-seed reference logged steps [1, 2], not 1..6" in f for f in rec["failures"])
    out = suite_out(tmp_path / "none", resumed_at(3))
    record = json.loads((out / "reference.json").read_text())
    (out / "reference.json").write_text(json.dumps({**record, "metrics": {}}))  # its deadline came before either run
    failures = rm.match(out, "colocated")["failures"]
    assert failures[:2] == ["the own-seed reference logged steps [], not 1..6",
                            "the other-seed reference logged steps [], not 1..6"]
    assert "vllm_engine (step 3): the reference has no step 3" in failures[2]


def test_a_chain_that_did_not_start_as_the_reference_did_is_named(tmp_path):
    out = suite_out(tmp_path, resumed_at(3))
    write_steps(out / "metrics" / "faults.colocated.vllm_engine.trainer_worker.0.jsonl", run(42, last=2))
    assert rm.match(out, "colocated")["passed"]  # its launch 0: the reference's step 1 on every exact quantity
    other_data = run(42, last=2)
    other_data[1]["prompt_length/mean"] = 61.0  # another tiny build's prompts
    write_steps(out / "metrics" / "faults.colocated.vllm_engine.trainer_worker.0.jsonl", other_data)
    assert rm.match(out, "colocated")["failures"] == [
        "faults.colocated.vllm_engine.trainer_worker.0.jsonl differs from the reference at step 1 on prompt_length/mean "
        "(61.0 and 54.0): the chain and the reference did not start alike (another tiny model or data)"]


def test_no_relaunch_or_no_data_position_is_no_proof(tmp_path):
    out = suite_out(tmp_path, resumed_at(3))
    (out / "vllm_engine.json").write_text(json.dumps({"fault": "vllm_engine", "mode": "colocated",
                                                      "recipe": "qwen25-7b-grpo", "resumed": False}))
    assert rm.match(out, "colocated")["failures"] == [
        f"no relaunch of qwen25-7b-grpo that resumed has its metrics in {out / 'metrics'}"]
    bare = resumed_at(3)
    for key in rm.DATA_POSITION:
        del bare[3][key]
    rec = rm.match(suite_out(tmp_path / "bare", bare), "colocated")
    assert "prompt_length/mean is not in both runs' step 3" in " ".join(rec["failures"])


def test_a_fresh_sampling_stream_passes_999_times_in_1000_a_quantity():
    """The bound's promise, checked on the worst case it allows: the relaunch's step 3 differs from the uninterrupted
    run's as much as another seed's does. 3000 draws of all seven quantities."""
    alarms = 0
    for trial in range(3000):
        own, other, resumed = run(3 * trial), run(3 * trial + 1), run(3 * trial + 2)
        p = rm.compare(3, resumed[3], own[3], rm.noise(own, other))
        alarms += len(p["failures"])
    assert alarms / (3000 * len(rm.NOISY)) < 0.003  # t(0.9995, 5): 0.001 expected


def test_noise_pools_the_steps_a_resume_lands_on():
    own, other = run(42), run(43)
    spread = rm.noise(own, other)
    diffs = [own[s]["actor/grad_norm"] - other[s]["actor/grad_norm"] for s in range(2, 7)]
    assert spread["actor/grad_norm"]["rms"] == pytest.approx((sum(d * d for d in diffs) / 5) ** 0.5)
    assert rm.noise(run(42, last=2), run(43, last=2)) == {}  # one step of noise is none
    assert rm.noise(run(42, last=3), run(43, last=3))["actor/pg_loss"]["t"] == 31.599


def test_the_file_loggers_lines_and_one_being_written(tmp_path):
    path = tmp_path / "m.jsonl"
    write_steps(path, {1: {"a": 1.0}, 2: {"a": 2.0}}, partial=True)
    assert rm.read_steps(path) == {1: {"a": 1.0}, 2: {"a": 2.0}}
    assert rm.read_steps(tmp_path / "none.jsonl") == {}
    (tmp_path / "bad.jsonl").write_text('{"step": 1, "data": {}}\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not a line of verl's file logger \(KeyError\('data'\)\)"):
        rm.read_steps(tmp_path / "bad.jsonl")


def test_main_writes_each_modes_record_and_says_pass_or_fail(tmp_path, capsys):
    out = suite_out(tmp_path, resumed_at(3))
    assert rm.main([str(out)]) == 0
    rec = json.loads((out / "resume_match.json").read_text())
    assert rec["passed"] and rec["references"]["seeds"] == {"own": 42, "other": 43}
    assert "[resume] colocated: 1 resumed step(s): PASS" in capsys.readouterr().out
    bad = suite_out(tmp_path / "bad", resumed_at(3, **{"actor/lr": 0.0}), mode="separate_async")
    assert rm.main([str(bad)]) == 1 and (bad / "resume_match-separate_async.json").is_file()
    assert "FAIL: vllm_engine (step 3): actor/lr" in capsys.readouterr().out
    assert rm.main([str(tmp_path / "empty")]) == 2
    assert "no reference*.json" in capsys.readouterr().err

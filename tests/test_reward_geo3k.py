"""verl_recipes.rewards.geo3k: 0.9 * acc + 0.1 * format, numeric acc for DAPO's filter, bounded time."""

import time

import pytest
from omegaconf import OmegaConf

from verl_recipes.rewards.geo3k import compute_score
from verl_recipes.rewards.grading import grade


@pytest.fixture(scope="module", autouse=True)
def started_grader():
    """Time bounds hold once the grader pool has started (a one-off ~1 s per process)."""
    grade("\\frac12", "0.5")


THINK = "<think>The triangle is isosceles, so the base angles are equal: x = (180 - 60) / 2.</think>"

# (response, ground truth, acc, format)
RESPONSES = [
    (THINK + " The answer is \\boxed{60}.", "60", 1.0, 1.0),
    (THINK + "\n\\boxed{60^\\circ}", "60", 1.0, 1.0),
    ("\n" + THINK + " \\boxed{3\\sqrt3}", "3\\sqrt{3}", 1.0, 1.0),
    (THINK + " $\\boxed{\\frac{7}{2}}$", "3.5", 1.0, 1.0),
    (THINK + " \\boxed{14}", "60", 0.0, 1.0),
    ("The answer is \\boxed{60}.", "60", 1.0, 0.0),  # no <think>
    ("<think>x = 60 \\boxed{60}</think> so sixty", "60", 1.0, 0.0),  # boxed only inside the thinking
    ("<think>unfinished thinking \\boxed{60}", "60", 1.0, 0.0),
    (THINK + " The answer is 60.", "60", 0.0, 0.0),
    ("Answer first \\boxed{60} " + THINK, "60", 1.0, 0.0),
]


@pytest.mark.parametrize(("response", "ground_truth", "acc", "well_formatted"), RESPONSES)
def test_score_is_accuracy_plus_format(response, ground_truth, acc, well_formatted):
    result = compute_score("hiyouga/geometry3k", response, ground_truth)
    assert (result["acc"], result["format"]) == (acc, well_formatted)
    assert result["score"] == pytest.approx(0.9 * acc + 0.1 * well_formatted)


@pytest.mark.slow
@pytest.mark.parametrize(
    "response",
    [
        "<think>" * 200_000 + "\\boxed{60}",
        THINK + "</think>" * 100_000 + "\\boxed{" * 100_000,
        THINK + " \\boxed{" + "\\frac{" * 10_000 + "}" * 10_000 + "}",
        THINK + " \\boxed{10^{10^{10^{10}}}}",
    ],
    ids=["200k think tags", "100k unbalanced", "10k deep frac", "power tower"],
)
def test_hostile_responses_return_within_bound(response):
    start = time.monotonic()
    result = compute_score("hiyouga/geometry3k", response, "5")
    assert time.monotonic() - start < 5.0
    assert result["acc"] == 0.0


def test_dapo_filter_reads_numeric_acc_the_way_verl_loads_it():
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": "pkg://verl_recipes.rewards.geo3k", "name": "compute_score"}}}
    )
    reward_fn = get_custom_reward_fn(config)
    results = [
        reward_fn(data_source="hiyouga/geometry3k", solution_str=response, ground_truth=truth, extra_info={})
        for response, truth, _, _ in RESPONSES
    ]
    assert all(result.keys() == {"score", "acc", "format", "timeout"} for result in results)
    assert all(isinstance(value, float) for result in results for value in result.values())
    # verl's ReplayBuffer groups by uid and keeps groups whose float(metric) values differ
    assert {float(result["acc"]) for result in results} == {0.0, 1.0}

"""verl_recipes.rewards.math and the shared verl_recipes.rewards.grading: extraction, equivalence, time bounds, threads, verl contract."""

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import pytest
from omegaconf import OmegaConf

from verl_recipes.rewards.grading import MAX_ANSWER_CHARS, extract_last_boxed, grade
from verl_recipes.rewards.math import compute_score

TIME_BOUND_S = 5.0  # promised: timeout_s (3 s) plus slack for killing the worker


@pytest.fixture(scope="module", autouse=True)
def started_grader():
    """Time bounds hold once the grader pool has started (a one-off ~1 s per process)."""
    grade("\\frac12", "0.5")


# (response, ground truth, expected acc)
ANSWERS = [
    # gsm8k: plain numbers, commas, dollars, decimals
    ("She sells 48 + 24 = 72 clips.\n#### 72\nThe final answer is \\boxed{72}.", "72", 1.0),
    ("Total: 1000 dollars, so \\boxed{1,000}", "1000", 1.0),
    ("Total is \\boxed{1000}", "1,000", 1.0),
    ("So the answer is $\\boxed{72.00}$", "72", 1.0),
    ("The cost is \\boxed{\\$72}.", "72", 1.0),
    ("He has \\boxed{-3} apples left", "-3", 1.0),
    ("The answer is \\boxed{71}", "72", 0.0),
    ("The answer is 72.", "72", 0.0),
    ("\\boxed{72}", 72, 1.0),
    # boxed variants and multiple boxes: the last one wins
    ("Thus \\boxed 5.", "5", 1.0),
    ("Thus $\\boxed {5}$", "5", 1.0),
    ("Thus \\fbox{5}", "5", 1.0),
    ("First guess \\boxed{3}, but rechecking gives \\boxed{5}.", "5", 1.0),
    ("First guess \\boxed{3}, but rechecking gives \\boxed{5}.", "3", 0.0),
    # fractions
    ("$\\boxed{\\frac{1}{2}}$", "\\dfrac12", 1.0),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{1/2}", "\\frac{1}{2}", 1.0),
    ("\\boxed{1.5}", "\\frac32", 1.0),
    ("\\boxed{\\tfrac{3}{2}}", "1\\frac{1}{2}", 1.0),
    ("\\boxed{0.333}", "\\frac13", 0.0),
    ("\\boxed{-\\frac{\\sqrt{3}}{2}}", "-\\frac{\\sqrt3}{2}", 1.0),
    # LaTeX variants
    ("\\boxed{\\left( 3, 4 \\right)}", "(3,4)", 1.0),
    ("\\boxed{(3, 4)}", "(3,4)", 1.0),
    ("\\boxed{(4, 3)}", "(3,4)", 0.0),
    ("\\boxed{x^2 + 1}", "x^2+1", 1.0),
    ("\\boxed{1 + x^2}", "x^2+1", 1.0),
    ("\\boxed{x^2 - 1}", "x^2+1", 0.0),
    ("\\boxed{10\\!000}", "10000", 1.0),
    ("\\boxed{5\\sqrt2}", "5\\sqrt{2}", 1.0),
    ("\\boxed{\\sqrt{50}}", "5\\sqrt{2}", 1.0),
    ("\\boxed{\\pi}", "\\pi", 1.0),
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}", 1.0),
    ("\\boxed{[2,5)}", "[2,5)", 1.0),
    ("\\boxed{(2,5)}", "[2,5)", 0.0),
    ("\\boxed{\\infty}", "\\infty", 1.0),
    # text, choices, units, degrees, percentages
    ("\\boxed{\\text{(B)}}", "\\text{(B)}", 1.0),
    ("\\boxed{B}", "\\text{(B)}", 1.0),
    ("\\boxed{C}", "\\text{(B)}", 0.0),
    ("\\boxed{5 \\text{ cm}}", "5", 1.0),
    ("\\boxed{30^\\circ}", "30", 1.0),
    ("\\boxed{30}", "30^\\circ", 1.0),
    ("\\boxed{30^{\\circ}}", "30^\\circ", 1.0),
    ("\\boxed{50\\%}", "50", 1.0),
    ("\\boxed{x = 5}", "5", 1.0),
    # the right answer written as the huge number it is
    ("\\boxed{1267650600228229401496703205376}", "2^{100}", 1.0),
]


@pytest.mark.parametrize(("response", "ground_truth", "acc"), ANSWERS)
def test_answers_are_graded(response, ground_truth, acc):
    result = compute_score("lighteval/MATH", response, ground_truth)
    assert result["acc"] == acc
    assert result["score"] == acc
    assert result["timeout"] == 0.0


@pytest.mark.parametrize(
    ("response", "boxed"),
    [
        ("\\boxed{\\frac{a}{b}}", "\\frac{a}{b}"),
        ("\\boxed{ 7 }", "7"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("\\boxed 12 apples", "12"),
        ("\\boxed{3} then \\fbox{4}", "4"),
        ("\\fbox{4} then \\boxed{3}", "3"),
        ("no answer here", None),
        ("\\boxed{}", None),
        ("\\boxed{5", None),  # truncated response
        ("\\boxedx", None),
        ("ends with \\boxed", None),
        ("\\boxed{" + "1" * (MAX_ANSWER_CHARS + 1) + "}", None),
        ("\\boxed{" + "{" * 40 + "}" * 40 + "}", None),  # deeper than MAX_BRACE_DEPTH
    ],
)
def test_extract_last_boxed(response, boxed):
    assert extract_last_boxed(response) == boxed


# Free-form answers of the kind SmolLM2-135M-Instruct writes to "What is 5 + 10? Put the final answer in \\boxed{}."
# (recipes/smollm2-135m-grpo), through the recipe's own reward: (response, ground truth, score, format)
SMOLLM2_ANSWERS = [
    ("5 + 10 = 15\n\n\\boxed{15}", "15", 1.0, 1.0),
    ("\\boxed{15}.", "15", 1.0, 1.0),
    ("To solve this, we add 5 and 10.\n\nSo, the final answer is \\boxed{15}.<|im_end|>", "15", 1.0, 1.0),
    ("$\\boxed{15}$<|im_end|>", "15", 1.0, 1.0),
    ("\\[ \\boxed{15} \\]", "15", 1.0, 1.0),
    ("\\boxed{**15**}", "15", 1.0, 1.0),  # markdown bold inside the box is dropped
    ("\\boxed{\\textbf{15}}", "15", 1.0, 1.0),
    ("\\boxed{5 + 10 = 15}", "15", 1.0, 1.0),  # one side of it is the value
    ("\\boxed{15 = 5 + 10}", "15", 1.0, 1.0),
    ("\\boxed{x = 15}", "15", 1.0, 1.0),
    ("\\boxed{15.0}", "15", 1.0, 1.0),
    ("\\boxed{15 \\text{ apples}}", "15", 1.0, 1.0),
    ("First \\boxed{14}, then rechecking: \\boxed{15}", "15", 1.0, 1.0),  # the last box is the answer
    ("\\boxed{15} or maybe \\boxed{16}", "15", 0.0, 1.0),
    ("\\boxed{15, 16}", "15", 0.0, 1.0),
    ("12 + 7 = 20.\n\n\\boxed{20}<|im_end|>", "19", 0.0, 1.0),  # a wrong sum
    ("\\boxed{-15}", "15", 0.0, 1.0),
    # the question restated, or a sum still to be done: the equivalence check alone would pay these
    ("\\boxed{5 + 10}", "15", 0.0, 1.0),
    ("\\boxed{10+5}", "15", 0.0, 1.0),
    ("\\boxed{3 \\times 5}", "15", 0.0, 1.0),
    ("\\boxed{15 + 0}", "15", 0.0, 1.0),
    # no box: the prompt asks for one, and the reward pays only a boxed answer
    ("The answer is 15.", "15", 0.0, 0.0),
    ("**15**", "15", 0.0, 0.0),
    ("15 + 3 = 5\n\nThe answer is \\boxed{}.<|im_end|>", "18", 0.0, 0.0),
]


@pytest.mark.parametrize(("response", "ground_truth", "score", "boxed"), SMOLLM2_ANSWERS)
def test_smollm2_style_answers_are_paid_what_a_reader_would_pay(response, ground_truth, score, boxed):
    result = compute_score("arithmetic", response, ground_truth)
    assert (result["score"], result["acc"], result["format"], result["timeout"]) == (score, score, boxed, 0.0)


def test_an_expression_still_counts_where_the_ground_truth_is_one():
    assert compute_score("lighteval/MATH", "\\boxed{2 + \\sqrt{3}}", "\\sqrt{3} + 2")["score"] == 1.0
    assert compute_score("lighteval/MATH", "\\boxed{\\frac{30}{2}}", "15")["score"] == 1.0  # a fraction is a value


def test_format_says_whether_a_boxed_answer_exists():
    assert compute_score("gsm8k", "The answer is \\boxed{7}", "8")["format"] == 1.0
    assert compute_score("gsm8k", "The answer is 8", "8")["format"] == 0.0


def test_bad_ground_truth_names_the_field():
    with pytest.raises(TypeError, match="reward_model.ground_truth"):
        compute_score("gsm8k", "\\boxed{1}", None)


def _deep_frac(depth):
    return "\\frac{" * depth + "1}{2}" * depth


ADVERSARIAL = {
    # name: (response, ground truth, acceptable acc values)
    "1MB junk then answer": ("x" * 1_000_000 + "\\boxed{72}", "72", {1.0}),
    "1MB of \\boxed{": ("\\boxed{" * 150_000, "72", {0.0}),
    "100k unbalanced braces": ("\\boxed" + "{" * 100_000, "72", {0.0}),
    "100k closing braces": ("}" * 100_000 + "\\boxed{72}", "72", {1.0}),
    "frac nested 10k deep": ("\\boxed{" + _deep_frac(10_000) + "}", "1", {0.0}),
    "frac nested 30 deep": ("\\boxed{" + _deep_frac(30) + "}", "1", {0.0, 1.0}),
    "power tower": ("\\boxed{10^{10^{10^{10}}}}", "5", {0.0}),
    "power tower 9": ("\\boxed{9^{9^{9^{9}}}}", "9", {0.0}),
    "sqrt chain": ("\\boxed{" + "\\sqrt{" * 30 + "2" + "}" * 30 + "}", "2", {0.0}),
    "huge factorial": ("\\boxed{100000000!}", "5", {0.0}),
    "500 digit number": ("\\boxed{" + "9" * 500 + "}", "5", {0.0}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ADVERSARIAL)
def test_adversarial_answers_return_within_bound(name):
    response, ground_truth, accs = ADVERSARIAL[name]
    start = time.monotonic()
    result = compute_score("lighteval/MATH", response, ground_truth)
    assert time.monotonic() - start < TIME_BOUND_S
    assert result["acc"] in accs


def test_timeout_counts_wrong_and_grading_recovers():
    start = time.monotonic()
    result = compute_score("lighteval/MATH", "\\boxed{10^{10^{10^{10}}}}", "5", timeout_s=1.0)
    assert time.monotonic() - start < 1.0 + 1.0
    assert result == {"score": 0.0, "acc": 0.0, "format": 1.0, "timeout": 1.0}
    # the killed worker is replaced: the next answers are graded normally
    for _ in range(3):
        assert compute_score("lighteval/MATH", "\\boxed{\\frac{1}{2}}", "0.5")["acc"] == 1.0


@pytest.mark.slow
def test_bound_holds_off_the_main_thread():
    results = []

    def run():
        start = time.monotonic()
        results.append((compute_score("lighteval/MATH", "\\boxed{9^{9^{9^{9}}}}", "5"), time.monotonic() - start))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    [(result, elapsed)] = results
    assert elapsed < TIME_BOUND_S
    assert result["acc"] == 0.0


def test_many_threads_at_once_get_their_own_answers():
    jobs = ANSWERS * 2
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda job: compute_score("lighteval/MATH", job[0], job[1]), jobs))
    assert [result["acc"] for result in results] == [acc for _, _, acc in jobs]


@pytest.mark.slow
def test_many_threads_with_some_timeouts():
    jobs = [("\\boxed{10^{10^{10^{10}}}}", "5", 0.0)] * 3 + ANSWERS[:20]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda job: compute_score("lighteval/MATH", job[0], job[1], timeout_s=2.0), jobs))
    assert [result["acc"] for result in results] == [acc for _, _, acc in jobs]
    assert sum(result["timeout"] for result in results) == 3
    assert time.monotonic() - start < 30


def test_grade_compares_plain_numbers_exactly():
    assert grade("1,000", "1000") == (True, False)
    assert grade("0.50", "0.5") == (True, False)
    assert grade("1001", "1,000") == (False, False)
    assert grade(None, "5") == (False, False)


def test_loads_and_runs_the_way_verl_calls_it():
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.utils.import_utils import load_extern_object

    assert load_extern_object("pkg://verl_recipes.rewards.math", "compute_score") is compute_score
    config = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": "pkg://verl_recipes.rewards.math", "name": "compute_score"}}}
    )
    reward_fn = get_custom_reward_fn(config)
    extra_info = {"index": 3, "num_turns": np.int32(2), "rollout_reward_scores": {}}

    async def score_like_the_naive_manager(response):
        # verl's reward managers run a sync compute_score in the default executor (worker threads)
        loop = asyncio.get_running_loop()
        call = partial(reward_fn, data_source="gsm8k_boxed", solution_str=response, ground_truth="72")
        return await loop.run_in_executor(None, lambda: call(extra_info=extra_info))

    async def score_all():
        responses = ["\\boxed{72}", "no box", "\\boxed{71}", "\\boxed{\\frac{144}{2}}"]
        return await asyncio.gather(*(score_like_the_naive_manager(response) for response in responses))

    results = asyncio.run(score_all())
    assert [result["acc"] for result in results] == [1.0, 0.0, 0.0, 1.0]
    # agent_loop builds one array per key from the first result's keys: every result needs the same keys
    assert all(result.keys() == results[0].keys() for result in results)
    for result in results:
        assert all(isinstance(value, float) for value in result.values()), result

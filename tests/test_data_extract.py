"""Row-level helpers of scripts/data: answer extraction, ReTool parsing, image checks, prompt templates."""

from io import BytesIO

import pytest
from PIL import Image

from verl_recipes.data.common import BadRow
from verl_recipes.data.dapo_math import dapo_problem
from verl_recipes.data.images import checked_image, with_placeholders
from verl_recipes.data.prompts import DAPO_PREFIX, DAPO_SUFFIX
from verl_recipes.data.retool_sft import question, tool_turns
from verl_recipes.data.text import gsm8k_answer, last_boxed


@pytest.mark.parametrize(
    "solution, expected",
    [
        ("The answer is $\\boxed{5}$.", "5"),
        ("$\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\sqrt{\\frac{a}{b}}} and more text", "\\sqrt{\\frac{a}{b}}"),
        # a box nested in a box belongs to the outer one
        ("\\boxed{x = \\boxed{3}}", "x = \\boxed{3}"),
        # escaped braces do not open or close groups
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{\\left\\{ x \\right.}", "\\left\\{ x \\right."),
        ("\\fbox{7}", "7"),
        ("so $\\boxed 12$.", "12"),
        ("\\boxed {4}", "4"),
        ("The answer is $\\boxed{\\text{(C)}}$", "\\text{(C)}"),
        ("no box here", None),
        ("\\boxed{unclosed", None),
        ("\\boxed{1} and then \\boxed{unclosed", None),
        ("\\boxed{}", None),
        ("\\boxedify{3}", None),
    ],
)
def test_last_boxed(solution, expected):
    assert last_boxed(solution) == expected


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("She has 3+4=<<3+4=7>>7 apples.\n#### 7", "7"),
        ("...\n#### 1,234", "1234"),
        ("...\n#### -5", "-5"),
        ("...\n####  2.5 ", "2.5"),
        ("a #### 1\n#### 2", "2"),
    ],
)
def test_gsm8k_answer(answer, expected):
    assert gsm8k_answer(answer) == expected


@pytest.mark.parametrize(
    "answer, reason", [("no marker 7", "no '####'"), ("#### seven", "not a number"), ("#### ", "not a number")]
)
def test_gsm8k_answer_bad(answer, reason):
    with pytest.raises(BadRow, match=reason):
        gsm8k_answer(answer)


def test_dapo_problem_round_trips_the_template():
    problem = "Find $x$ if $2x = 4$.\n\nGive $x$."
    row = {"prompt": [{"role": "user", "content": DAPO_PREFIX + problem + DAPO_SUFFIX}]}
    assert dapo_problem(row) == problem
    with pytest.raises(BadRow, match="DAPO-Math template"):
        dapo_problem({"prompt": [{"role": "user", "content": problem}]})
    with pytest.raises(BadRow, match="chat message list"):
        dapo_problem({"prompt": None})


RETOOL_USER = (
    "Solve the following problem step by step. ...\n\n*user question:*\nWhat is 2**10?\n\n"
    "Remember to place the final answer in the last part using the format: \n<answer>\n\\boxed{'...'}\n</answer>"
)
RETOOL_REPLY = (
    "Let me compute.\n<code>\n```python\nprint(2**10)\n```\n</code>\n<interpreter>\n1024\n</interpreter>\n\n"
    "Check again.\n<code>\n```python\nx = 2**10\nprint(x)\n```\n</code>\n<interpreter>\n1024\n</interpreter>\n"
    "<code>\n```python\nprint(1024 == 2**10)\n```\n</code>\n<interpreter>True</interpreter>\n"
    "So it is 1024.\n<answer>\n\\boxed{1024}\n</answer>"
)


def test_retool_question_and_turns():
    assert question(RETOOL_USER) == "What is 2**10?"
    turns = tool_turns(RETOOL_REPLY)
    assert [t["role"] for t in turns] == ["assistant", "tool"] * 3 + ["assistant"]
    assert turns[0]["content"] == "Let me compute."
    assert turns[0]["tool_calls"] == [
        {"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": "print(2**10)"}}}
    ]
    assert turns[2]["tool_calls"][0]["function"]["arguments"]["code"] == "x = 2**10\nprint(x)"
    assert turns[4]["content"] == ""  # consecutive calls: no text between them
    assert turns[5]["content"] == "True"
    assert turns[-1] == {"role": "assistant", "content": "So it is 1024.\n\n\\boxed{1024}"}


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("<code>\n```python\nprint(1)\n```\n</code>\nno output\n<answer>1</answer>", "not followed by <interpreter>"),
        ("<code>\nprint(1)\n", "never closed"),
        ("<code>print(1)</code><interpreter>1", "never closed"),
        ("<code>\n```python\n```\n</code><interpreter>1</interpreter>", "empty code block"),
        ("<code>print(1)</code><interpreter>1</interpreter>", "no final answer"),
        ("<interpreter>1</interpreter> \\boxed{1}", "without a preceding <code>"),
    ],
)
def test_retool_turns_bad(reply, reason):
    with pytest.raises(BadRow, match=reason):
        tool_turns(reply)


def test_retool_question_needs_marker():
    with pytest.raises(BadRow, match="user question"):
        question("What is 2**10?")


def _png(size, mode="RGB") -> bytes:
    buffer = BytesIO()
    Image.new(mode, size, "white").save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    "size, expected, upscaled",
    [
        ((64, 48), (64, 48), False),
        ((10, 20), (28, 56), True),
        ((20, 10), (56, 28), True),
        ((27, 300), (28, 312), True),
        ((28, 28), (28, 28), False),
    ],
)
def test_checked_image_upscales_small_images(size, expected, upscaled):
    notes = []
    entry = checked_image({"bytes": _png(size), "path": None}, notes.append)
    assert Image.open(BytesIO(entry["bytes"])).size == expected
    assert bool(notes) == upscaled
    if not upscaled:
        assert entry["bytes"] == _png(size)  # untouched images keep their bytes


def test_checked_image_accepts_pil_and_bytes():
    assert Image.open(BytesIO(checked_image(Image.new("L", (30, 30)), print)["bytes"])).size == (30, 30)
    assert checked_image(_png((40, 40)), print)["bytes"] == _png((40, 40))


@pytest.mark.parametrize(
    "value, reason",
    [
        ({"bytes": b"not an image", "path": None}, "does not decode"),
        ({"bytes": None, "path": None}, "no bytes nor readable path"),
        ("file.png", "no bytes nor readable path"),
        ({"bytes": _png((1000, 4)), "path": None}, "aspect ratio"),
    ],
)
def test_checked_image_bad(value, reason):
    with pytest.raises(BadRow, match=reason):
        checked_image(value, print)


@pytest.mark.parametrize(
    "text, n, expected",
    [
        ("<image>Find x.", 1, "<image>Find x."),
        ("<image><image>Compare.", 2, "<image><image>Compare."),
        ("Find x.", 1, "<image>\nFind x."),
        ("Compare.", 2, "<image><image>\nCompare."),
    ],
)
def test_with_placeholders(text, n, expected):
    assert with_placeholders(text, n, print) == expected


def test_with_placeholders_mismatch():
    with pytest.raises(BadRow, match="2 <image> placeholders but the row has 1"):
        with_placeholders("<image> and <image>", 1, print)

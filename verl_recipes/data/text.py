"""Ground-truth extraction from reference solutions."""

import re

from verl_recipes.data.common import BadRow

_BOX_COMMAND = re.compile(r"\\(boxed|fbox)(?![A-Za-z])")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def last_boxed(text: str) -> str | None:
    """Content of the last top-level \\boxed{...} (or \\fbox{...}, or the old "\\boxed x$" form) in `text`.

    Braces are matched as TeX does: escaped \\{ and \\} do not open or close a group. A \\boxed nested inside
    another one belongs to the outer box. None when there is no box or the last one is never closed.
    """
    found = None
    pos = 0
    while match := _BOX_COMMAND.search(text, pos):
        start = match.end()
        while start < len(text) and text[start] in " \t":
            start += 1
        if start < len(text) and text[start] == "{":
            end = _closing_brace(text, start)
            if end is None:
                return None
            found = text[start + 1 : end]
            pos = end + 1
        elif match.group(1) == "boxed" and start > match.end():
            spaced = re.match(r"[^$\n]*", text[start:]).group(0)
            found = spaced if spaced.strip() else found
            pos = start + len(spaced)
        else:
            pos = match.end()
    return None if found is None or not found.strip() else found.strip()


def _closing_brace(text: str, open_at: int) -> int | None:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] in "{}" and not _escaped(text, i):
            depth += 1 if text[i] == "{" else -1
            if depth == 0:
                return i
    return None


def _escaped(text: str, i: int) -> bool:
    backslashes = 0
    while i - backslashes - 1 >= 0 and text[i - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def gsm8k_answer(answer: str) -> str:
    """The number after the last "####" of a GSM8K answer, without thousands separators."""
    _, marker, tail = answer.rpartition("####")
    if not marker:
        raise BadRow("answer has no '####' final-answer marker")
    value = tail.strip().replace(",", "")
    if not _NUMBER.fullmatch(value):
        raise BadRow(f"final answer {value[:40]!r} after '####' is not a number")
    return value


def boxed_answer(solution: str) -> str:
    value = last_boxed(solution)
    if value is None:
        raise BadRow("solution has no complete \\boxed{...}")
    return value

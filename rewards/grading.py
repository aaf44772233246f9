"""Shared answer grading for the math-style rewards (math, geo3k, retool).

Finds the final ``\\boxed{...}`` answer of a response and decides whether it equals the ground truth.

Model output is hostile, and sympy can hang or eat memory on crafted LaTeX (``10^{10^{10^{10}}}``), so:
- only the last ``MAX_TAIL_CHARS`` of a response are searched, and a boxed answer longer than
  ``MAX_ANSWER_CHARS`` or nested deeper than ``MAX_BRACE_DEPTH`` is no answer;
- plain numbers ("72", "1,000", "0.50") are compared in-process, which is exact and cheap;
- everything else runs mathruler, then math-verify, in a small pool of persistent worker subprocesses
  (``python -m verl_recipes.rewards.grading``). A check that overruns ``timeout_s`` (or whose worker dies) gets its
  worker killed (a replacement starts in the background) and counts as wrong with ``timed_out=True``.
  This works from any thread, unlike ``signal.alarm``. Workers also cap their own address space and CPU
  time, so a worker whose parent died cannot spin forever.

Pool size: ``REWARD_GRADER_WORKERS`` (default ``min(4, cpu_count)``) per process that grades.
"""

import json
import numbers
import os
import re
import select
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

MAX_TAIL_CHARS = 8192
MAX_ANSWER_CHARS = 512
MAX_BRACE_DEPTH = 32
DEFAULT_TIMEOUT_S = 3.0
WORKER_STARTUP_TIMEOUT_S = 60.0
WORKER_MEMORY_BYTES = 2 << 30
# Extra CPU seconds a worker may spend on one check before the kernel kills it (SIGXCPU); only matters
# when nobody is left to kill it on timeout.
WORKER_CPU_GRACE_S = 10

_PLAIN_NUMBER = re.compile(r"-?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?")


def extract_last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{..}``, ``\\boxed 5`` or ``\\fbox{..}`` in the tail of ``text``."""
    tail = text[-MAX_TAIL_CHARS:]
    command = max(("\\boxed", "\\fbox"), key=tail.rfind)
    start = tail.rfind(command)
    if start < 0:
        return None
    rest = tail[start + len(command) :]
    argument = rest.lstrip(" ")
    if argument.startswith("{"):
        content = _braced_group(argument)
    elif argument and len(argument) < len(rest):  # "\boxed 5": the argument is the next word
        content = re.match(r"[^\s$]*", argument[: MAX_ANSWER_CHARS + 1]).group().rstrip(".,;")
    else:
        return None
    return content if content and len(content) <= MAX_ANSWER_CHARS else None


def _braced_group(text: str) -> str | None:
    """Inside of the brace group opening ``text``; None when unbalanced, too long or too deep."""
    depth, i = 0, 0
    end = min(len(text), MAX_ANSWER_CHARS + 2)
    while i < end:
        char = text[i]
        if char == "\\":  # \{ and \} are literal braces
            i += 2
            continue
        if char == "{":
            depth += 1
            if depth > MAX_BRACE_DEPTH:
                return None
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[1:i].strip()
        i += 1
    return None


def grade(answer: str | None, ground_truth, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[bool, bool]:
    """(correct, timed_out) for an extracted answer; a None answer is simply wrong."""
    if not isinstance(ground_truth, (str, numbers.Number)):
        raise TypeError(
            f"reward_model.ground_truth must be a string or a number, got {type(ground_truth).__name__}: "
            f"{ground_truth!r:.100}"
        )
    if answer is None:
        return False, False
    ground_truth = str(ground_truth).strip()
    plain = _plain_number(answer), _plain_number(ground_truth)
    if None not in plain:
        return plain[0] == plain[1], False
    return _pool().check(answer, ground_truth, timeout_s)


def _plain_number(text: str) -> Decimal | None:
    text = text.strip()
    return Decimal(text.replace(",", "")) if _PLAIN_NUMBER.fullmatch(text) else None


class _Worker:
    """One grader subprocess speaking one JSON line in, one line ("1"/"0") out."""

    def __init__(self):
        root = Path(__file__).resolve().parents[3]  # the folder that holds verl_recipes/
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "verl_recipes.rewards.grading"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=root,
            env=env,
        )
        if self._read_line(WORKER_STARTUP_TIMEOUT_S) != b"ready":
            self.kill()
            raise RuntimeError(
                f"grader worker `{sys.executable} -m verl_recipes.rewards.grading` did not start within "
                f"{WORKER_STARTUP_TIMEOUT_S:.0f} s; check that mathruler and math-verify import in that "
                "interpreter (its stderr is above)"
            )

    def check(self, answer: str, ground_truth: str, timeout_s: float) -> bool | None:
        """Verdict, or None when the worker overran ``timeout_s`` or died."""
        try:
            self.proc.stdin.write(json.dumps([answer, ground_truth, timeout_s]).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return None
        line = self._read_line(timeout_s)
        return None if line is None else line == b"1"

    def _read_line(self, timeout_s: float) -> bytes | None:
        deadline = time.monotonic() + timeout_s
        fd, line = self.proc.stdout.fileno(), b""
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 64)
            if not chunk:
                return None
            line += chunk
        return line.strip()

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


class _Pool:
    """At most ``size`` workers; a thread holds a slot while it uses one worker."""

    def __init__(self, size: int):
        self.pid = os.getpid()
        self._slots = threading.Semaphore(size)
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        for _ in range(size):  # start every worker now, so no check waits for a cold start later
            self._slots.acquire()
            threading.Thread(target=self._start_worker, daemon=True).start()

    def check(self, answer: str, ground_truth: str, timeout_s: float) -> tuple[bool, bool]:
        self._slots.acquire()
        try:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            worker = worker or _Worker()  # only when a background start failed
        except BaseException:
            self._slots.release()
            raise
        verdict = None
        try:
            verdict = worker.check(answer, ground_truth, timeout_s)
        finally:
            if verdict is None:
                worker.kill()
                # The replacement keeps this slot until it is ready, so waiting threads get a live worker.
                threading.Thread(target=self._start_worker, daemon=True).start()
            else:
                with self._lock:
                    self._idle.append(worker)
                self._slots.release()
        return bool(verdict), verdict is None

    def _start_worker(self):
        """Start a worker into the idle list, then free the slot this thread was holding for it."""
        try:
            worker = _Worker()
            with self._lock:
                self._idle.append(worker)
        except Exception:
            pass  # the next check starts its own worker and raises the error to its caller
        finally:
            self._slots.release()


# what a grader worker imports -> how to install it (the launcher's package check names a missing one)
WORKER_PACKAGES = {"mathruler": "mathruler (requirements/gpu.txt)", "math_verify": "math-verify (requirements/gpu.txt)",
                   "pylatexenc": "pylatexenc (a dependency of mathruler)"}

_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():  # a forked child must not share its parent's pipes
            _POOL = _Pool(int(os.environ.get("REWARD_GRADER_WORKERS") or min(4, os.cpu_count() or 1)))
        return _POOL


def _serve():
    """Worker main loop: read [answer, ground_truth, timeout_s] lines, answer "1" or "0"."""
    import logging
    import resource

    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the protocol

    from math_verify import parse, verify
    from mathruler.grader import grade_answer

    logging.disable(logging.WARNING)  # math-verify logs every timeout and parse failure

    def set_soft_limit(kind: int, value: int):
        hard = resource.getrlimit(kind)[1]
        resource.setrlimit(kind, (value if hard == resource.RLIM_INFINITY else min(value, hard), hard))

    set_soft_limit(resource.RLIMIT_AS, WORKER_MEMORY_BYTES)

    def equivalent(answer: str, ground_truth: str) -> bool:
        if grade_answer(answer, ground_truth):
            return True
        return verify(parse(f"\\boxed{{{ground_truth}}}"), parse(f"\\boxed{{{answer}}}"))

    equivalent("\\frac12", "0.5")  # warm up parsers before reporting ready
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        answer, ground_truth, timeout_s = json.loads(line)
        used = resource.getrusage(resource.RUSAGE_SELF)
        set_soft_limit(resource.RLIMIT_CPU, int(used.ru_utime + used.ru_stime + timeout_s) + WORKER_CPU_GRACE_S)
        try:
            correct = equivalent(answer, ground_truth)
        except Exception:  # MemoryError, RecursionError, sympy errors: not equivalent
            correct = False
        out.write(b"1\n" if correct else b"0\n")
        out.flush()


if __name__ == "__main__":
    _serve()

"""Synthetic tool-integrated reasoning tasks: computations the model does with the `python` tool (a count
of primes, a digit sum of 2^n, a count of divisors, a digit sum of n!), answer in `\\boxed{}`. None is
within the tiny model's own arithmetic, and the question space (~22,000) is too large to memorise: it
has to copy the question's number into a cell, run it and read the answer off its output. Numbers and
answers have at most 4 digits: the 4-layer tiny model copies those reliably after SFT, 6-digit ones
not (bench/results/agentic.md).

A question belongs to one split by its hash (`split_of`: validation 20 %, sft 60 %, train 20 %), so no
validation question is ever trained on, whatever the seeds. `make_tasks` draws the episode tasks;
`make_demonstrations` draws SFT tasks with the turns that solve them, of two kinds, as a corpus of
worked solutions has them: in `TOOL_SHARE` of them one cell computes the answer and the answer is read
off its output; the rest state the answer at once, written out without the tool. Both are right (the
env core scores every one 1), but only the first is a way the tiny model can follow: it cannot compute
these numbers in its head, so after SFT it answers without the tool in about the share it saw and those
answers are mostly wrong. Whether to call the tool is the *choice* multi-turn GRPO learns from the
episode reward (bench/results/agentic.md), as tool-integrated RL raises the model's tool use in
practice. The output itself is the environment's to give (services/env/demonstrations.py plays the
turns on the env core and refuses a demonstration whose answer is not what the cell printed).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable

from services.common.errors import InvalidArgument
from services.common.toolcalls import format_tool_calls

PROMPT = "{question} Give the answer as \\boxed{{N}}."
"""The user's turn: the question and the answer's form; the `python` tool is offered, not prescribed."""
ANSWER = "The answer is \\boxed{{{answer}}}."
"""A demonstration's last turn: the answer, read off the cell's output or stated at once."""
TOOL_SHARE = 0.5
"""The share of SFT demonstrations that call the tool (drawn per demonstration); the rest answer at once."""
SPLITS = {"validation": range(0, 2), "sft": range(2, 8), "train": range(8, 10)}
"""A question's split: the last decimal digit of its hash (split_of)."""
SPLIT_SIZE = {name: len(digits) * 22_362 // 10 for name, digits in SPLITS.items()}
"""About how many distinct questions each split has (~4,470 validation, ~13,400 sft, ~4,470 train)."""
MAX_MISSES = 20_000
"""Draws in a row that find no new question of the split before `make_tasks` gives up (no endless loop)."""


def split_of(question: str) -> str:
    digit = int(hashlib.sha256(question.encode()).hexdigest(), 16) % 10
    return next(name for name, digits in SPLITS.items() if digit in digits)


def _primes_below(n: int) -> int:
    return sum(1 for k in range(2, n) if all(k % d for d in range(2, math.isqrt(k) + 1)))


def _draw(rng: random.Random) -> tuple[str, Callable[[], int], str]:
    """(question, its answer, the cell that computes it); the answer is a function, computed only for a
    draw that is kept (most are of another split). One number of up to 4 digits to copy into the cell,
    an answer of up to 4 digits to read off its output (the most: 1,229 primes below 9,999; 2^2000's
    digits sum to 2,704; 500!'s to 4,599; 64 divisors)."""
    kind = rng.randrange(4)
    if kind == 0:
        n = rng.randint(20, 9999)
        return (f"How many primes are there below {n}?", lambda: _primes_below(n),
                f"print(sum(1 for k in range(2, {n}) if all(k % d for d in range(2, int(k ** 0.5) + 1))))")
    if kind == 1:
        n = rng.randint(10, 2000)
        return (f"What is the sum of the digits of 2 to the power {n}?", lambda: sum(int(d) for d in str(2**n)),
                f"print(sum(int(d) for d in str(2 ** {n})))")
    if kind == 2:
        n = rng.randint(100, 9999)
        return (f"How many divisors does {n} have?", lambda: sum(1 for d in range(1, n + 1) if n % d == 0),
                f"print(sum(1 for d in range(1, {n} + 1) if {n} % d == 0))")
    n = rng.randint(10, 500)
    return (f"What is the sum of the digits of {n} factorial?", lambda: sum(int(d) for d in str(math.factorial(n))),
            f"import math\nprint(sum(int(d) for d in str(math.factorial({n}))))")


def _drawn(rng: random.Random, n: int, split: str) -> list[tuple[dict, str]]:
    """`n` (task record, its cell) pairs of `split`, no question twice."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    out, seen, misses = [], set(), 0
    while len(out) < n:
        question, answer, code = _draw(rng)
        if question in seen or split_of(question) != split:
            misses += 1
            if misses > MAX_MISSES:
                raise InvalidArgument("n", f"{n} distinct {split} questions asked; {len(out)} were found in "
                                      f"{MAX_MISSES} draws (the split has about {SPLIT_SIZE[split]:,}): ask for fewer")
            continue
        misses = 0
        seen.add(question)
        out.append(({"id": f"python-{split}-{len(out)}", "environment": "python",
                     "messages": [{"role": "user", "content": PROMPT.format(question=question)}],
                     "ground_truth": str(answer())}, code))
    return out


def make_tasks(rng: random.Random, n: int, split: str) -> list[dict]:
    return [task for task, _code in _drawn(rng, n, split)]


def make_demonstrations(rng: random.Random, n: int, tool_share: float = TOOL_SHARE) -> list[dict]:
    """`n` SFT tasks with the turns that solve them: {"task": record, "turns": [the cell's call, the answer]}
    with probability `tool_share`, else {"task": record, "turns": [the answer]}. The call is in the chat
    template's format (services.common.toolcalls); the answer quotes the task's ground truth, which
    playing the turns on the env core checks against what the cell printed (and scores, either way)."""
    if not 0.0 <= tool_share <= 1.0:
        raise InvalidArgument("tool_share", f"must be within [0, 1], got {tool_share}")
    out = []
    for task, code in _drawn(rng, n, "sft"):
        answer = ANSWER.format(answer=task["ground_truth"])
        if rng.random() < tool_share:
            turns = [format_tool_calls([{"name": "python", "arguments": {"code": code}}]), answer]
        else:
            turns = [answer]
        out.append({"task": task, "turns": turns})
    return out

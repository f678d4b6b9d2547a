"""Synthetic math: small arithmetic and fraction simplification, answered in \\boxed{...}.

Level 1: a + b below 20. Level 2: sums and differences below 100, one-digit products.
Level 3: two-digit times one-digit, a + b - c, simplifying a fraction ("6/8" -> "3/4").
The record's `ground_truth` is the plain answer ("42", "3/4"); the response ends with \\boxed{answer}.
This module knows nothing about files or verifiers.
"""

from __future__ import annotations

import random
from math import gcd

from services.common.synth.base import (
    boxed,
    make_wrong,
    pick_level,
    sft_record,
    task_records,
    user,
    with_thinking,
)
from services.common.tasks import TaskRecord

DOMAIN = "math"


def make_problem(rng: random.Random, level: int) -> tuple[str, str, str]:
    """(question, worked expression, answer) of one problem at `level`."""
    if level == 1:
        a, b = rng.randint(1, 19), rng.randint(1, 19)
        return f"What is {a} + {b}?", f"{a} + {b} = {a + b}", str(a + b)
    if level == 2:
        kind = rng.randrange(3)
        if kind == 0:
            a, b = rng.randint(10, 60), rng.randint(10, 39)
            return f"What is {a} + {b}?", f"{a} + {b} = {a + b}", str(a + b)
        if kind == 1:
            a, b = sorted((rng.randint(1, 99), rng.randint(1, 99)), reverse=True)
            return f"What is {a} - {b}?", f"{a} - {b} = {a - b}", str(a - b)
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        return f"What is {a} * {b}?", f"{a} * {b} = {a * b}", str(a * b)
    kind = rng.randrange(3)
    if kind == 0:
        a, b = rng.randint(11, 40), rng.randint(2, 9)
        return f"What is {a} * {b}?", f"{a} * {b} = {a * b}", str(a * b)
    if kind == 1:
        a, b, c = rng.randint(10, 50), rng.randint(10, 50), rng.randint(1, 20)
        return (
            f"What is {a} + {b} - {c}?",
            f"{a} + {b} = {a + b}, {a + b} - {c} = {a + b - c}",
            str(a + b - c),
        )
    p, q = rng.randint(1, 8), rng.randint(2, 9)
    if p >= q or gcd(p, q) != 1:
        p = 1
    k = rng.randint(2, 6)
    return f"Simplify the fraction {p * k}/{q * k}.", f"divide by {k}: {p * k}/{q * k} = {p}/{q}", f"{p}/{q}"


def wrong_answer(rng: random.Random, answer: str) -> str:
    """A plausible but wrong answer (off by a little)."""
    if "/" in answer:
        p, q = answer.split("/")
        return f"{q}/{p}" if p != q else f"{int(p) + 1}/{q}"
    return str(int(answer) + rng.choice([-2, -1, 1, 2]))


def make_tasks(rng: random.Random, n: int, split: str) -> list[TaskRecord]:
    def fields(rng: random.Random, level: int) -> dict:
        question, _, answer = make_problem(rng, level)
        return dict(
            messages=[user(question)],
            ground_truth=answer,
        )

    return task_records(rng, n, split, DOMAIN, fields)


def make_sft(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        level = pick_level(rng, "sft")
        question, work, answer = make_problem(rng, level)
        wrong = make_wrong(rng)
        shown = wrong_answer(rng, answer) if wrong else answer
        work = work if not wrong else work.rsplit(answer, 1)[0] + shown
        text, thinking = with_thinking(rng, work, f"The answer is {boxed(shown)}.")
        if not thinking:
            text = f"{work}. The answer is {boxed(shown)}."
        out.append(
            sft_record(
                DOMAIN,
                i,
                [user(question)],
                text,
                level,
                correct=not wrong,
                thinking=thinking,
                ground_truth=answer,
            )
        )
    return out

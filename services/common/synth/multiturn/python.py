"""Synthetic tool-integrated reasoning tasks: small computations the model does with the `python` tool
(a sum of squares, a factorial, a count of primes, a Fibonacci number, a digit sum of 2^n), answer in
`\\boxed{}`."""

from __future__ import annotations

import math
import random

PROMPT = "{question} Use the python tool to compute it, then give the answer as \\boxed{{N}}."


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _draw(rng: random.Random) -> tuple[str, int]:
    kind = rng.randrange(5)
    if kind == 0:
        n = rng.randint(5, 60)
        return f"What is the sum of the squares of the integers from 1 to {n}?", sum(i * i for i in range(1, n + 1))
    if kind == 1:
        n = rng.randint(5, 15)
        return f"What is {n} factorial?", math.factorial(n)
    if kind == 2:
        n = rng.randint(20, 500)
        return f"How many primes are there below {n}?", sum(1 for k in range(2, n) if all(k % d for d in range(2, math.isqrt(k) + 1)))
    if kind == 3:
        n = rng.randint(10, 60)
        return f"With F(0) = 0 and F(1) = 1, what is the Fibonacci number F({n})?", _fib(n)
    n = rng.randint(10, 200)
    return f"What is the sum of the digits of 2 to the power {n}?", sum(int(d) for d in str(2**n))


def make_tasks(rng: random.Random, n: int, split: str) -> list[dict]:
    out, seen = [], set()
    while len(out) < n:
        question, answer = _draw(rng)
        if question in seen and len(seen) < 400:
            continue
        seen.add(question)
        out.append({"id": f"python-{split}-{len(out)}", "environment": "python",
                    "messages": [{"role": "user", "content": PROMPT.format(question=question)}],
                    "ground_truth": str(answer)})
    return out

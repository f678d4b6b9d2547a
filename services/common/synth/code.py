"""Synthetic code: tiny python functions and stdin programs, with tests the reward sandbox runs.

Level 1: one-argument arithmetic (`x + 7`). Level 2: two arguments, strings, lists, parity.
Level 3: filtered sums, letter counts, and whole programs reading stdin (input/output tests).
Tests use the record format of `services.common.tasks`: {"assert": "f(1) == 8"} evaluated after
the candidate's code, or {"input": "3 4\\n", "output": "7\\n"}. The answer is one ```python fence.
This module knows nothing about running code; expected values come from the reference itself.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from services.common.synth.base import pick_level, sft_record, task_records, user, with_thinking
from services.common.tasks import TaskRecord

DOMAIN = "code"
FUNC_NAMES = ["f", "g", "h", "calc", "compute", "solve", "work", "run"]
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


@dataclass(frozen=True)
class Problem:
    prompt: str
    solution: str
    tests: list[dict]
    entry_point: str | None
    hint: str


def _fn_problem(name: str, params: str, what: str, body: str, cases: list[tuple], ref) -> Problem:
    """A function task: `def name(params): return body`, with one assert per case."""
    tests = [{"assert": f"{name}({', '.join(repr(a) for a in args)}) == {ref(*args)!r}"} for args in cases]
    return Problem(
        f"Write a python function {name}({params}) that returns {what}.",
        f"def {name}({params}):\n    return {body}",
        tests,
        name,
        f"return {body}",
    )


def _words(rng: random.Random) -> list[str]:
    return [rng.choice(["cat", "sun", "tree", "hello", "blue", "code", "river", "apple"]) for _ in range(3)]


def make_problem(rng: random.Random, level: int) -> Problem:
    name = rng.choice(FUNC_NAMES)
    k = rng.randint(1, 30)
    nums = [(rng.randint(-5, 40),) for _ in range(3)]
    if level == 1:
        op = rng.choice(list(OPS))
        return _fn_problem(name, "x", f"x {op} {k}", f"x {op} {k}", nums, lambda x: OPS[op](x, k))
    if level == 2:
        kind = rng.randrange(6)
        words = [(w,) for w in _words(rng)]
        lists = [([rng.randint(0, 50) for _ in range(rng.randint(1, 5))],) for _ in range(3)]
        k = rng.randint(2, 4)
        if kind == 0:
            op = rng.choice(list(OPS))
            pairs = [(rng.randint(0, 20), rng.randint(0, 20)) for _ in range(3)]
            return _fn_problem(
                name, "a, b", f"a {op} b + {k}", f"a {op} b + {k}", pairs, lambda a, b: OPS[op](a, b) + k
            )
        if kind == 1:
            return _fn_problem(name, "s", "s reversed", "s[::-1]", words, lambda s: s[::-1])
        if kind == 2:
            return _fn_problem(name, "s", f"s repeated {k} times", f"s * {k}", words, lambda s: s * k)
        if kind == 3:
            return _fn_problem(
                name, "s", f"the first {k} characters of s", f"s[:{k}]", words, lambda s: s[:k]
            )
        if kind == 4:
            return _fn_problem(name, "xs", "the largest number in the list xs", "max(xs)", lists, max)
        return _fn_problem(
            name, "x", "True if x is even, else False", "x % 2 == 0", nums, lambda x: x % 2 == 0
        )
    kind = rng.randrange(4)
    if kind == 0:
        lists = [([rng.randint(0, 30) for _ in range(rng.randint(2, 6))],) for _ in range(3)]
        return _fn_problem(
            name,
            "xs",
            f"the sum of the numbers in xs greater than {k}",
            f"sum(v for v in xs if v > {k})",
            lists,
            lambda xs: sum(v for v in xs if v > k),
        )
    if kind == 1:
        c = rng.choice("aeiou")
        words = [(w,) for w in ["banana", "apple", "orange", "kiwi", "avocado", "pineapple"]]
        cases = rng.sample(words, 3)
        return _fn_problem(
            name,
            "s",
            f"how many times the letter {c} appears in s",
            f"s.count({c!r})",
            cases,
            lambda s: s.count(c),
        )
    op = rng.choice(list(OPS))
    if kind == 2:
        word = {"+": "sum", "-": "difference", "*": "product"}[op]
        pairs = [(rng.randint(0, 50), rng.randint(0, 50)) for _ in range(3)]
        tests = [{"input": f"{a} {b}\n", "output": f"{OPS[op](a, b)}\n"} for a, b in pairs]
        return Problem(
            f"Write a python program that reads two integers a and b from one line and prints their {word} a {op} b.",
            f"a, b = map(int, input().split())\nprint(a {op} b)",
            tests,
            None,
            f"print(a {op} b)",
        )
    tests = [{"input": f"{n}\n", "output": f"{OPS[op](n, k)}\n"} for (n,) in nums]
    return Problem(
        f"Write a python program that reads an integer n and prints n {op} {k}.",
        f"n = int(input())\nprint(n {op} {k})",
        tests,
        None,
        f"print(n {op} {k})",
    )


SFT_OPEN_FENCE = 0.25
"""Share of the SFT demonstrations whose closing ``` is left off, as a weaker teacher's traces now
and then stop before the fence closes. The verifier then runs the whole response, fence line and
all, which is not Python. SFT leaves a model that does this now and then whatever it is asked, a
mistake RL removes; with every demonstration well formed, code RL raised code by +0.01..+0.05 in the
demo's three seeds (its failures were content errors a dozen steps barely move); with a quarter of
the fences open by +0.08..+0.28, each interval above zero (an earlier recipe), and by +0.22..+0.28
in bench/results/demo_seeds_64_prompts.md, +0.17..+0.22 in demo_seeds_128_prompts_zen3.md and
+0.15..+0.17 in the committed one (bench/results/demo_seeds.md, where MOPD's outcome term had raised
code before code RL)."""


def answer_text(solution: str, closed: bool = True) -> str:
    """The solution in a ```python fence; `closed=False` leaves the closing fence off."""
    return f"```python\n{solution}" + ("\n```" if closed else "")


def make_tasks(rng: random.Random, n: int, split: str) -> list[TaskRecord]:
    def fields(rng: random.Random, level: int) -> dict:
        p = make_problem(rng, level)
        return dict(
            messages=[user(p.prompt)],
            tests=p.tests,
            entry_point=p.entry_point,
        )

    return task_records(rng, n, split, DOMAIN, fields)


def make_sft(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        level = pick_level(rng, "sft")
        p = make_problem(rng, level)
        closed = rng.random() >= SFT_OPEN_FENCE
        text, thinking = with_thinking(rng, p.hint, answer_text(p.solution, closed))
        out.append(
            sft_record(
                DOMAIN, i, [user(p.prompt)], text, level, correct=closed, thinking=thinking, tests=p.tests
            )
        )
    return out

"""Synthetic software engineering: a tiny python package with an off-by-one bug and a failing test.

Each task is a repository snapshot (`repo.files`: pkg/<mod>.py, tests/test_<mod>.py, conftest.py),
the pytest ids that must go from failing to passing (`fail_to_pass`) or keep passing
(`pass_to_pass`), and a `reference_patch`: a unified diff that `patch -p1` and `git apply` accept.
Level 1: the module holds only the buggy function; levels 2-3 add one or two correct helpers (whose
tests are pass_to_pass). The answer is the diff in a ```diff fence.
This module knows nothing about running tests.
"""

from __future__ import annotations

import difflib
import random

from services.common.synth.base import pick_level, sft_record, task_records, user, with_thinking
from services.common.tasks import TaskRecord

DOMAIN = "swe"
MODULES = ["util", "lists", "numbers", "tools", "core", "helpers", "mathx", "seq"]
FUNCS = ["last", "total", "take", "count_up", "at_most", "middle"]
# name -> (params, buggy body, fixed body, reference implementation, draw args, why)
BUGS = {
    "last": (
        "xs",
        "xs[len(xs)]",
        "xs[len(xs) - 1]",
        lambda xs: xs[-1],
        lambda rng: ([rng.randint(0, 9) for _ in range(rng.randint(2, 5))],),
        "the last index is len(xs) - 1",
    ),
    "total": (
        "n",
        "sum(range(1, n))",
        "sum(range(1, n + 1))",
        lambda n: n * (n + 1) // 2,
        lambda rng: (rng.randint(2, 20),),
        "range stops one before n",
    ),
    "take": (
        "xs, k",
        "xs[:k - 1]",
        "xs[:k]",
        lambda xs, k: xs[:k],
        lambda rng: ([rng.randint(0, 9) for _ in range(6)], rng.randint(1, 5)),
        "the slice keeps one item too few",
    ),
    "count_up": (
        "n",
        "list(range(1, n))",
        "list(range(1, n + 1))",
        lambda n: list(range(1, n + 1)),
        lambda rng: (rng.randint(2, 8),),
        "range must include n",
    ),
    "at_most": (
        "xs, k",
        "sum(1 for x in xs if x < k)",
        "sum(1 for x in xs if x <= k)",
        lambda xs, k: sum(1 for x in xs if x <= k),
        lambda rng: ([1, 2, 3, 4, 5, 6], rng.randint(1, 5)),
        "at most k means x <= k",
    ),
    "middle": (
        "xs",
        "xs[len(xs) // 2 + 1]",
        "xs[len(xs) // 2]",
        lambda xs: xs[len(xs) // 2],
        lambda rng: (rng.sample(range(10), 3),),
        "the middle index is len(xs) // 2",
    ),
}
# correct helpers: name -> (params, body, reference, draw args)
HELPERS = {
    "double": ("x", "x * 2", lambda x: x * 2, lambda rng: (rng.randint(0, 50),)),
    "is_empty": (
        "xs",
        "len(xs) == 0",
        lambda xs: len(xs) == 0,
        lambda rng: ([] if rng.random() < 0.5 else [1],),
    ),
    "greet": (
        "name",
        '"hi " + name',
        lambda name: "hi " + name,
        lambda rng: (rng.choice(["ann", "bo", "cy"]),),
    ),
}


def _fn(name: str, params: str, body: str) -> str:
    return f"def {name}({params}):\n    return {body}\n"


def _test(name: str, args: tuple, expected) -> str:
    return f"def test_{name}():\n    assert {name}({', '.join(repr(a) for a in args)}) == {expected!r}\n"


def make_problem(rng: random.Random, level: int) -> dict:
    """The repo, test ids, reference patch and prompt of one task."""
    mod, bug = rng.choice(MODULES), rng.choice(FUNCS)
    params, buggy, fixed, ref, draw, why = BUGS[bug]
    helpers = rng.sample(list(HELPERS), level - 1)
    names = list(helpers)
    names.insert(rng.randrange(len(names) + 1), bug)
    old, new, tests = [], [], []
    for name in names:
        if name == bug:
            old.append(_fn(bug, params, buggy))
            new.append(_fn(bug, params, fixed))
            args = draw(rng)
            tests.append(_test(bug, args, ref(*args)))
            claim = f"{bug}({', '.join(repr(a) for a in args)}) should be {ref(*args)!r}"
        else:
            h_params, body, h_ref, h_draw = HELPERS[name]
            old.append(_fn(name, h_params, body))
            new.append(old[-1])
            args = h_draw(rng)
            tests.append(_test(name, args, h_ref(*args)))
    source, fixed_source = "\n\n".join(old), "\n\n".join(new)
    path, test_path = f"pkg/{mod}.py", f"tests/test_{mod}.py"
    test_source = f"from pkg.{mod} import {', '.join(names)}\n\n\n" + "\n\n".join(tests)
    patch = "".join(
        difflib.unified_diff(
            source.splitlines(True), fixed_source.splitlines(True), f"a/{path}", f"b/{path}", n=2
        )
    )
    prompt = (
        f"Fix the bug in {path}: {test_path}::test_{bug} fails because {claim}. Answer with a diff.\n"
        f"```python\n{source}```"
    )
    return {
        "prompt": prompt,
        "files": {"pkg/__init__.py": "", path: source, test_path: test_source, "conftest.py": ""},
        "fail_to_pass": [f"{test_path}::test_{bug}"],
        "pass_to_pass": [f"{test_path}::test_{h}" for h in helpers],
        "patch": patch,
        "why": why,
    }


def answer_text(patch: str) -> str:
    return f"```diff\n{patch}```"


def make_tasks(rng: random.Random, n: int, split: str) -> list[TaskRecord]:
    def fields(rng: random.Random, level: int) -> dict:
        p = make_problem(rng, level)
        return dict(
            messages=[user(p["prompt"])],
            repo={"files": p["files"]},
            patch_tests={"fail_to_pass": p["fail_to_pass"], "pass_to_pass": p["pass_to_pass"]},
            reference_patch=p["patch"],
        )

    return task_records(rng, n, split, DOMAIN, fields)


def make_sft(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        level = pick_level(rng, "sft")
        p = make_problem(rng, level)
        text, thinking = with_thinking(rng, f"The bug: {p['why']}.", answer_text(p["patch"]))
        out.append(sft_record(DOMAIN, i, [user(p["prompt"])], text, level, correct=True, thinking=thinking))
    return out

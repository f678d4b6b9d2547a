"""`code`: the response's program run in the sandbox against the task's `tests`; 1 only if all pass.

The program is the last fenced code block of the response, else the whole response. A test is
`{"input", "output"}` (the program reads stdin; its stdout must equal `output` up to whitespace:
both are compared as sequences of whitespace-separated tokens) or `{"assert": "<expression>"}`
(evaluated after the candidate's code has run as `__main__`; all assert tests share one run,
each reports on its own line tagged with a per-run nonce, so printing "PASS" does not fake one).
Input/output tests stop at the first failure. A program that leaves processes behind fails.
A program killed by a signal fails ("killed by SIGSEGV" is the program's own crash: the sandbox
reports a run that died before the program started as `SandboxFailure`, which, like any failure
of the sandbox itself, gives the verdict `error` — masked, never scored as the candidate's 0).
The nonce sits in the harness the candidate could read: this stops accidental, not determined,
forgery. This module knows nothing about how the sandbox isolates, or about gRPC.
"""

from __future__ import annotations

import math
import re
import secrets
from typing import Any

from services.common.errors import InvalidArgument
from services.common.sandbox.sandbox import RunResult, SandboxFailure
from services.reward.verifiers.base import (
    Check,
    Context,
    Outcome,
    correct,
    error,
    incorrect,
    invalid,
    timeout,
)

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)

_HARNESS = """\
import sys
_NONCE, _TESTS = {nonce!r}, {tests!r}
_ns = {{"__name__": "__main__", "__builtins__": __builtins__}}
try:
    exec(compile(open("solution.py", encoding="utf-8").read(), "solution.py", "exec"), _ns)
except SystemExit:
    pass
_out = sys.__stdout__
for _i, _expr in enumerate(_TESTS):
    try:
        _ok = bool(eval(_expr, _ns))
        _out.write(f"{{_NONCE}} {{_i}} {{'PASS' if _ok else 'FAIL false'}}\\n")
    except BaseException as _e:
        _out.write(f"{{_NONCE}} {{_i}} FAIL {{type(_e).__name__}}: {{str(_e)[:200]!r}}\\n")
    _out.flush()
"""


def extract_program(response: str) -> str:
    """The last fenced code block's body, else the whole response (stripped)."""
    blocks = _FENCE.findall(response)
    return (blocks[-1] if blocks else response).strip()


def same_output(got: str, want: str) -> bool:
    """Whitespace-normalised equality: the token sequences `s.split()` are equal."""
    return got.split() == want.split()


def _failure(result: RunResult) -> str | None:
    """Why a run failed on its own terms (before looking at output), or None."""
    if result.timed_out:
        return "timed out"
    if result.signal_name == "SIGXCPU":
        return "timed out (CPU time limit)"
    if result.signal_name:
        return f"killed by {result.signal_name}"
    if result.survivors:
        return f"left {result.survivors} process(es) running"
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or [""]
        return f"exit {result.returncode}: {tail[0][:200]}"
    return None


def _io_checks(program: str, tests: list[tuple[int, dict]], ctx: Context, limits) -> list[Check]:
    checks = []
    for i, test in tests:
        result = ctx.sandbox.run_python(program, stdin=test["input"], limits=limits)
        problem = _failure(result)
        if problem is None and not same_output(result.stdout, test["output"]):
            problem = f"expected {test['output'][:80]!r}, got {result.stdout[:80]!r}"
        checks.append(Check(f"test[{i}]", problem is None, problem or "passed"))
        if problem is not None:
            break
    return checks


def _assert_checks(program: str, tests: list[tuple[int, str]], ctx: Context, limits) -> list[Check]:
    nonce = secrets.token_hex(16)
    exprs = [re.sub(r"^\s*assert\s+", "", t) for _, t in tests]
    harness = _HARNESS.format(nonce=nonce, tests=exprs)
    result = ctx.sandbox.run(["{python}", "-E", "-s", "main.py"], files={"main.py": harness, "solution.py": program},
                             limits=limits)
    verdicts = dict(re.findall(rf"^{nonce} (\d+) (.*)$", result.stdout, re.MULTILINE))
    problem = _failure(result)
    checks = []
    for k, (i, _) in enumerate(tests):
        line = verdicts.get(str(k))
        ok = line == "PASS" and problem is None
        if ok:
            detail = "passed"
        else:
            detail = problem or (line if line and line != "PASS" else "no result (the program ended first)")
        checks.append(Check(f"test[{i}]", ok, detail))
    return checks


def code_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """1 when the program passes every test in the sandbox; timeouts give verdict `timeout`."""
    tests = getattr(task, "tests", None)
    if not isinstance(tests, list) or not tests:
        raise InvalidArgument("tests", "code tasks need a non-empty list of tests")
    if ctx.sandbox is None or not ctx.sandbox.usable:
        why = getattr(ctx.sandbox, "problem", "no sandbox configured")
        return error(f"sandbox unavailable, code not run: {why}")
    program = extract_program(response)
    if not program:
        return invalid("empty program")
    wall = ctx.options.code_timeout_s
    limits = ctx.sandbox.with_limits(wall_s=wall, cpu_s=max(1, math.ceil(wall)))
    io_tests = [(i, t) for i, t in enumerate(tests) if "input" in t]
    assert_tests = [(i, t["assert"]) for i, t in enumerate(tests) if "assert" in t]
    try:
        checks = _io_checks(program, io_tests, ctx, limits) if io_tests else []
        if assert_tests and all(c.passed for c in checks):
            checks += _assert_checks(program, assert_tests, ctx, limits)
    except SandboxFailure as exc:
        return error(f"sandbox failure, code not judged: {exc}")
    failed = [c for c in checks if not c.passed]
    if not failed and len(checks) == len(tests):
        return correct(f"all {len(tests)} tests passed", checks)
    if any(c.detail.startswith("timed out") for c in failed):
        return timeout(f"{failed[0].name} timed out after {wall:g}s", checks)
    first = failed[0] if failed else Check("tests", False, "not all tests ran")
    return incorrect(f"{first.name}: {first.detail}", checks)

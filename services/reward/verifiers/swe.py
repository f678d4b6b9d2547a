"""`swe`: the response's unified diff applied to the task's small repository, its tests run.

Everything happens inside one sandbox run, in a fresh copy of `repo.files`: a runner script
applies the diff with `git apply` (falling back to `patch -p1`), puts back the task's own test
files and removes any conftest.py the diff added (so a patch cannot rewrite the judge), then runs
pytest on `fail_to_pass + pass_to_pass` with a tiny plugin that records each test id's outcome.
A diff that does not apply is `invalid`; reward 1 only when every listed test passes. This module
knows nothing about how the sandbox isolates, or about gRPC. NeMo Gym rows (`instance`) are scored
by `swe_gym.py` (SEARCH/REPLACE edits inside `<solution>`).
"""

from __future__ import annotations

import json
import math
import re
import secrets
from pathlib import Path
from typing import Any

from services.common.errors import InvalidArgument
from services.common.sandbox.pylib import pytest_path
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

_DIFF_FENCE = re.compile(r"```(?:diff|patch)[^\n]*\n(.*?)```", re.DOTALL)
_ANY_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)

_PLUGIN = """\
import json
_RESULTS = {}
def pytest_runtest_logreport(report):
    old = _RESULTS.get(report.nodeid)
    if report.failed:
        _RESULTS[report.nodeid] = "failed"
    elif report.skipped and old is None:
        _RESULTS[report.nodeid] = "skipped"
    elif report.when == "call" and report.passed and old is None:
        _RESULTS[report.nodeid] = "passed"
def pytest_sessionfinish(session):
    with open("_cascade_results.json", "w") as f:
        json.dump(_RESULTS, f)
"""

_RUNNER = """\
import json, os, subprocess, sys
NONCE, TESTS, PRISTINE = {nonce!r}, {tests!r}, {pristine!r}
def done(**kw):
    print(NONCE + json.dumps(kw), flush=True)
    sys.exit(0)
apply = subprocess.run(["git", "apply", "--whitespace=nowarn", "_cascade.diff"], capture_output=True, text=True)
if apply.returncode != 0:
    fallback = subprocess.run(["patch", "-p1", "--batch", "--forward", "-i", "_cascade.diff"], capture_output=True, text=True)
    if fallback.returncode != 0:
        done(applied=False, why=(apply.stderr or apply.stdout).strip()[-400:])
for path, text in PRISTINE.items():
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
for root, dirs, files in os.walk("."):
    for name in files:
        rel = os.path.relpath(os.path.join(root, name))
        if name == "conftest.py" and rel not in PRISTINE:
            os.remove(rel)
os.remove("_cascade.diff")
subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_cascade_plugin", *TESTS],
               capture_output=True)
try:
    results = json.load(open("_cascade_results.json"))
except (OSError, ValueError):
    results = {{}}
done(applied=True, results=results)
"""


def extract_diff(response: str) -> str | None:
    """The last ```diff fence, else the last fence that looks like a diff, else a bare diff, else None."""
    for pattern in (_DIFF_FENCE, _ANY_FENCE):
        blocks = [b for b in pattern.findall(response) if "+++ " in b or "@@" in b]
        if blocks:
            return blocks[-1]
    start = response.find("--- ")
    return response[start:] if start >= 0 and "+++ " in response[start:] else None


def _judge_files(files: dict[str, str], test_ids: list[str]) -> dict[str, str]:
    """The files a patch may not change: the tested files and every conftest.py of the repo."""
    keep = {t.split("::")[0] for t in test_ids}
    return {p: t for p, t in files.items() if p in keep or Path(p).name == "conftest.py"}


def swe_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """1 when the diff applies and every fail_to_pass and pass_to_pass test then passes."""
    if getattr(task, "instance", None) is not None:
        from services.reward.verifiers.swe_gym import swe_gym_reward

        return swe_gym_reward(task, response, ctx)
    files = (getattr(task, "repo", None) or {}).get("files")
    tests = getattr(task, "patch_tests", None) or {}
    if not isinstance(files, dict) or not files:
        raise InvalidArgument("repo.files", "swe tasks need the repository files")
    test_ids = list(tests.get("fail_to_pass") or []) + list(tests.get("pass_to_pass") or [])
    if not test_ids:
        raise InvalidArgument("patch_tests.fail_to_pass", "swe tasks need at least one test id")
    if ctx.sandbox is None or not ctx.sandbox.usable:
        return error(f"sandbox unavailable, tests not run: {getattr(ctx.sandbox, 'problem', 'no sandbox')}")
    diff = extract_diff(response)
    if diff is None:
        return invalid("no unified diff in the response")
    nonce = secrets.token_hex(16)
    runner = _RUNNER.format(nonce=nonce, tests=test_ids, pristine=_judge_files(files, test_ids))
    wall = ctx.options.code_timeout_s * 2
    limits = ctx.sandbox.with_limits(wall_s=wall, cpu_s=max(1, math.ceil(wall)))
    result = ctx.sandbox.run(
        ["{python}", "-s", "_cascade_runner.py"],
        files={**files, "_cascade.diff": diff, "_cascade_runner.py": runner, "_cascade_plugin.py": _PLUGIN},
        limits=limits, pythonpath=pytest_path(ctx.sandbox.root),
    )
    if result.timed_out:
        return timeout(f"tests did not finish in {wall:g}s")
    lines = [ln[len(nonce):] for ln in result.stdout.splitlines() if ln.startswith(nonce)]
    if not lines:
        return error(f"runner gave no result (exit {result.returncode}): {result.stderr.strip()[-300:]}")
    report = json.loads(lines[-1])
    if not report["applied"]:
        return invalid(f"patch does not apply: {report['why']}")
    checks = [Check(t, report["results"].get(t) == "passed", report["results"].get(t, "not run")) for t in test_ids]
    failed = [c for c in checks if not c.passed]
    if failed:
        return incorrect(f"{len(failed)}/{len(checks)} tests fail, first {failed[0].name}: {failed[0].detail}", checks)
    return correct(f"patch applies and all {len(checks)} tests pass", checks)

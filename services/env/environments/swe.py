"""`swe`: a software-engineering agent's tools over a task's repository; reward: the hidden tests pass.

Tools: `list_files()`, `read_file(path)`, `replace_in_file(path, old, new)` (`old` must occur exactly
once) and `run_tests()` (pytest over the repository as it stands, in the sandbox, the tail of its
output back). The episode's repository is its own copy of the task's files, held in the service: the
file tools only read and edit that copy (no code runs), so they need no fence; everything that runs
code — the tests — runs in the sandbox (`services.common.sandbox`) on a fresh directory made from
the copy. Reward (at the end): the task's `patch_tests` ids (fail_to_pass + pass_to_pass) run with
the task's test files put back as they were, its `hidden_tests` files added and any conftest.py the
model added removed; 1 when every one passes. Task shape: `repo.files` {path: text}, `patch_tests`,
optional `hidden_tests` {path: text}, `messages`. This module knows nothing about episodes' ids or gRPC.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.sandbox.pylib import pytest_path
from services.common.sandbox.sandbox import SandboxFailure
from services.env.environments.base import (
    Environment,
    EnvironmentFailure,
    EpisodeState,
    Score,
    ToolError,
    coerce_arguments,
    function_schema,
    messages_of,
)

S = {"type": "string"}
SCHEMAS = {
    "list_files": function_schema("list_files", "Lists the repository's files.", {}),
    "read_file": function_schema("read_file", "Returns a file's text.", {"path": {**S, "description": "File path"}}, ("path",)),
    "replace_in_file": function_schema(
        "replace_in_file", "Replaces the one occurrence of `old` in a file with `new`.",
        {"path": {**S, "description": "File path"}, "old": {**S, "description": "Exact text to replace (must occur once)"},
         "new": {**S, "description": "Replacement text"}}, ("path", "old", "new")),
    "run_tests": function_schema("run_tests", "Runs the repository's tests (pytest) and returns the end of the report.", {}),
}
_PLUGIN = """\
import json
OUTCOMES = {}
def pytest_runtest_logreport(report):
    if report.failed:
        OUTCOMES[report.nodeid] = "failed"
    elif report.when == "call" and report.nodeid not in OUTCOMES:
        OUTCOMES[report.nodeid] = "passed" if report.passed else "skipped"
def pytest_sessionfinish(session):
    json.dump(OUTCOMES, open("_outcomes.json", "w"))
"""
_JUDGE = """\
import json, subprocess, sys
tests = json.load(open("_tests.json"))
subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_judge_plugin", *tests],
               capture_output=True)
try:
    outcomes = json.load(open("_outcomes.json"))
except (OSError, ValueError):
    outcomes = {}
print(sys.argv[1] + json.dumps(outcomes))
"""


@dataclass(frozen=True)
class SweTask:
    id: str
    messages: list[dict]
    files: dict[str, str]
    tests: list[str]
    hidden: dict[str, str]


@dataclass
class SweState(EpisodeState):
    task: SweTask | None = None
    files: dict[str, str] = field(default_factory=dict)


def _text_map(value, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidArgument(where, "must be an object {relative path: file text}")
    for path in value:
        p = PurePosixPath(path)
        if p.is_absolute() or ".." in p.parts or not path:
            raise InvalidArgument(where, f"path {path!r} leaves the repository")
    return dict(value)


def from_record(record: dict) -> SweTask:
    if not isinstance(record, dict):
        raise InvalidArgument("task_json", f"must be a JSON object, got {type(record).__name__}")
    files = _text_map((record.get("repo") or {}).get("files") if isinstance(record.get("repo"), dict) else None, "repo.files")
    if not files:
        raise InvalidArgument("repo.files", "must hold the repository's files")
    pt = record.get("patch_tests")
    if not isinstance(pt, dict):
        raise InvalidArgument("patch_tests", "must be {fail_to_pass: [pytest ids], pass_to_pass: [pytest ids]}")
    tests = [*(pt.get("fail_to_pass") or []), *(pt.get("pass_to_pass") or [])]
    if not tests or not all(isinstance(t, str) for t in tests):
        raise InvalidArgument("patch_tests.fail_to_pass", "needs at least one pytest id (strings)")
    hidden = _text_map(record.get("hidden_tests") or {}, "hidden_tests")
    rid = record.get("id")
    rid = str(rid) if rid is not None else hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]
    return SweTask(rid, messages_of(record), files, tests, hidden)


def judged_files(task: SweTask, files: dict[str, str]) -> dict[str, str]:
    """The repository as the judge runs it: the model's files, the tested files and conftest.py files
    as the task had them, no conftest.py the model added, and the hidden test files."""
    tested = {t.split("::")[0] for t in task.tests}
    pristine = {p: t for p, t in task.files.items() if p in tested or PurePosixPath(p).name == "conftest.py"}
    kept = {p: t for p, t in files.items() if PurePosixPath(p).name != "conftest.py" or p in pristine}
    return {**kept, **pristine, **task.hidden}


class SweEnvironment(Environment):
    name = "swe"
    description = "a repository with a bug: list, read and edit files, run the tests (sandboxed); reward: hidden tests pass"
    tool_names = tuple(SCHEMAS)

    def parse(self, record: dict) -> SweTask:
        return from_record(record)

    def open(self, task: SweTask) -> SweState:
        sandbox = self.services.sandbox
        if sandbox is None or not sandbox.usable:
            raise FailedPrecondition(f"swe episodes need the sandbox: {getattr(sandbox, 'problem', 'none built')}")
        return SweState(messages=list(task.messages), tools=list(SCHEMAS.values()), task=task, files=dict(task.files))

    def timeout_s(self, name: str) -> float:
        c = self.services.config
        return c.swe_test_timeout_s if name == "run_tests" else c.tool_timeout_s

    def call(self, state: SweState, name: str, arguments: dict, budget_s: float) -> str:
        args = coerce_arguments(SCHEMAS[name], arguments)
        if name == "list_files":
            return "\n".join(sorted(state.files))
        if name == "run_tests":
            return self._run_tests(state.files, budget_s)
        path = args.get("path")
        if not path or path not in state.files:
            raise ToolError(f"no file {path!r}; list_files shows the files")
        if name == "read_file":
            return state.files[path]
        old, new = args.get("old"), args.get("new")
        if old is None or new is None or old == "":
            raise ToolError("replace_in_file needs `old` (non-empty) and `new`")
        count = state.files[path].count(old)
        if count != 1:
            raise ToolError(f"`old` occurs {count} times in {path}; it must occur exactly once")
        state.files[path] = state.files[path].replace(old, new)
        return f"replaced 1 occurrence in {path}"

    def _sandbox_run(self, argv: list[str], files: dict[str, str], budget_s: float):
        sandbox = self.services.sandbox
        limits = sandbox.with_limits(wall_s=budget_s, cpu_s=max(1, math.ceil(budget_s)))
        try:
            return sandbox.run(argv, files=files, limits=limits, pythonpath=pytest_path(sandbox.root))
        except SandboxFailure as exc:
            raise EnvironmentFailure(str(exc)) from None

    def _run_tests(self, files: dict[str, str], budget_s: float) -> str:
        result = self._sandbox_run(["{python}", "-s", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short"],
                                   files, budget_s)
        report = (result.stdout + result.stderr).strip()
        if result.timed_out:
            raise ToolError(f"the tests ran past the {budget_s:.3g}s budget and were stopped\n{report[-1500:]}")
        budget = self.services.config.tool_output_chars
        return report if len(report) <= budget else "[... start cut]\n" + report[-(budget - 20):]

    def score(self, state: SweState, final: str | None) -> Score:
        task, nonce = state.task, secrets.token_hex(12)
        files = {**judged_files(task, state.files), "_judge.py": _JUDGE, "_judge_plugin.py": _PLUGIN,
                 "_tests.json": json.dumps(task.tests)}
        wall = self.services.config.swe_test_timeout_s
        result = self._sandbox_run(["{python}", "-s", "_judge.py", nonce], files, wall)
        lines = [ln[len(nonce):] for ln in result.stdout.splitlines() if ln.startswith(nonce)]
        if result.timed_out:
            return Score(0.0, f"the hidden tests did not finish in {wall:g}s")
        if not lines:
            raise EnvironmentFailure(f"the judge gave no result (exit {result.returncode}): {result.stderr.strip()[-300:]}")
        outcomes = json.loads(lines[-1])
        failed = [t for t in task.tests if outcomes.get(t) != "passed"]
        if failed:
            return Score(0.0, f"{len(failed)}/{len(task.tests)} hidden tests fail, first {failed[0]}: "
                              f"{outcomes.get(failed[0], 'not run')}")
        return Score(1.0, f"all {len(task.tests)} hidden tests pass")

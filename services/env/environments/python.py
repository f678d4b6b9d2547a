"""`python`: tool-integrated reasoning — the model runs Python cells in the sandbox while it thinks.

One tool, `python(code)`: the cell runs in a fresh sandboxed process (`services.common.sandbox`:
own uid, no network, rlimits, wall-clock budget, every child reaped) and its stdout and stderr come
back, cut to the service's output budget. State across cells is kept by *replay*: the episode keeps
the cells that ran to the end, and each call runs them again (their output discarded) before the
new cell, so variables and functions persist. Replay rather than a live interpreter per episode
because a sandbox run is one-shot by design (fresh directory, every process killed at its end):
nothing of an episode outlives its calls, closing one frees nothing but memory, and a cell that
hangs or forks a daemon is cut by the same fence as any run. The cost: a cell's work is redone by
every later call (cells that time out or fail are not kept, so they are not replayed).
Reward: the final answer (the last `\\boxed{}`, else the whole answer text) equals the task's
answer (numbers within 1e-6 relative). This module knows nothing about episodes' ids or gRPC.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from dataclasses import dataclass, field

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.sandbox.sandbox import SandboxFailure
from services.env.environments.base import (
    Environment,
    EnvironmentFailure,
    EpisodeState,
    Score,
    ToolError,
    function_schema,
    messages_of,
)

SCHEMA = function_schema(
    "python", "Runs a Python cell and returns what it prints. Variables and functions of earlier cells persist.",
    {"code": {"type": "string", "description": "The Python code to run"}}, ("code",),
)
_RUNNER = """\
import contextlib, io, json, sys, traceback
cells = json.load(open("_cells.json"))
scope = {"__name__": "__main__"}
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    for cell in cells[:-1]:
        try:
            exec(compile(cell, "<cell>", "exec"), scope)
        except BaseException:
            pass
sys.stdout.write(sys.argv[1])
sys.stdout.flush()
try:
    exec(compile(cells[-1], "<cell>", "exec"), scope)
except SystemExit:
    raise
except BaseException:
    traceback.print_exc(limit=-3)
    sys.exit(1)
"""


@dataclass(frozen=True)
class PythonTask:
    id: str
    messages: list[dict]
    answer: str


@dataclass
class PythonState(EpisodeState):
    task: PythonTask | None = None
    cells: list[str] = field(default_factory=list)


def from_record(record: dict) -> PythonTask:
    """`messages` (or `responses_create_params.input`) and the answer: `ground_truth` or `expected_answer`."""
    if not isinstance(record, dict):
        raise InvalidArgument("task_json", f"must be a JSON object, got {type(record).__name__}")
    messages = messages_of(record)
    key = "ground_truth" if "ground_truth" in record else "expected_answer"
    answer = record.get(key)
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)) or str(answer).strip() == "":
        raise InvalidArgument(key, f"must be the answer (a string or number), got {answer!r}")
    rid = record.get("id")
    rid = str(rid) if rid is not None else hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]
    return PythonTask(rid, messages, str(answer).strip())


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed{")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            if depth == 0:
                return text[i:j]
            depth -= 1
    return None


def _normal(text: str) -> str:
    return re.sub(r"\s+|\$|,(?=\d{3})", "", text).rstrip(".")


def answers_match(got: str, want: str) -> bool:
    """Equal after dropping spaces, `$`, thousands commas and a final dot; numbers within 1e-6 relative."""
    a, b = _normal(got), _normal(want)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
    except ValueError:
        return a == b


class PythonEnvironment(Environment):
    name = "python"
    description = "a sandboxed Python interpreter the model calls while reasoning; reward: the final answer is right"
    tool_names = ("python",)

    def parse(self, record: dict) -> PythonTask:
        return from_record(record)

    def open(self, task: PythonTask) -> PythonState:
        sandbox = self.services.sandbox
        if sandbox is None or not sandbox.usable:
            raise FailedPrecondition(f"python episodes need the sandbox: {getattr(sandbox, 'problem', 'none built')}")
        return PythonState(messages=list(task.messages), tools=[SCHEMA], task=task)

    def call(self, state: PythonState, name: str, arguments: dict, budget_s: float) -> str:
        code = arguments.get("code")
        if set(arguments) - {"code"}:
            raise ToolError(f"unknown parameter(s) {sorted(set(arguments) - {'code'})} of python; parameters: code")
        if not isinstance(code, str) or not code.strip():
            raise ToolError("python needs `code` (the cell to run)")
        sandbox, nonce = self.services.sandbox, secrets.token_hex(12)
        limits = sandbox.with_limits(wall_s=budget_s, cpu_s=max(1, math.ceil(budget_s)))
        cells = [*state.cells, code]
        try:
            result = sandbox.run(["{python}", "-I", "_runner.py", nonce],
                                 files={"_runner.py": _RUNNER, "_cells.json": json.dumps(cells)}, limits=limits)
        except SandboxFailure as exc:
            raise EnvironmentFailure(str(exc)) from None
        out = result.stdout.split(nonce, 1)[1] if nonce in result.stdout else ""
        if result.stderr:
            out += ("\n" if out and not out.endswith("\n") else "") + result.stderr
        if result.timed_out or result.signal_name == "SIGXCPU":  # the wall clock or the CPU limit, whichever came first
            raise ToolError(f"the cell ran past its {budget_s:.3g}s budget and was stopped (not kept)\n{out}".rstrip())
        if result.returncode != 0:
            how = result.signal_name or f"exit status {result.returncode}"
            return f"{out}\n[the cell failed ({how}); it is not kept]".lstrip("\n")
        state.cells.append(code)
        return out if out else "[no output]"

    def score(self, state: PythonState, final: str | None) -> Score:
        if final is None:
            return Score(0.0, "no final answer")
        boxed = last_boxed(final)
        got = boxed if boxed is not None else final
        if answers_match(got, state.task.answer):
            return Score(1.0, f"answer {got.strip()!r} is right")
        return Score(0.0, f"answer {got.strip()[:80]!r} is not {state.task.answer!r}")

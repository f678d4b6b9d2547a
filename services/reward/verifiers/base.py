"""The shapes every verifier shares: its outcome, its options and its signature.

A verifier is a function `(task, response, ctx) -> Outcome`. `task` is a task record (anything with
the TaskRecord attributes it reads), `ctx` carries options and, for the verifiers that need them,
the sandbox or the reward model. A verifier raises `InvalidArgument` for a bad *task* (a field
missing or malformed) — the caller turns that into an `error` verdict; a bad *response* is an
`invalid` or `incorrect` Outcome. This module knows nothing about gRPC or worker processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from services.common.errors import InvalidArgument

VERDICTS = ("correct", "incorrect", "invalid", "timeout", "error")
Verdict = Literal["correct", "incorrect", "invalid", "timeout", "error"]


@dataclass(frozen=True)
class Check:
    """One check a verifier made: an instruction, a unit test, an expected call."""

    name: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Outcome:
    """What a verifier concluded about one response."""

    reward: float
    verdict: Verdict
    reason: str
    checks: tuple[Check, ...] = ()


def correct(reason: str = "correct", checks=(), reward: float = 1.0) -> Outcome:
    return Outcome(reward, "correct", reason, tuple(checks))


def incorrect(reason: str, checks=(), reward: float = 0.0) -> Outcome:
    return Outcome(reward, "incorrect", reason, tuple(checks))


def invalid(reason: str, checks=()) -> Outcome:
    return Outcome(0.0, "invalid", reason, tuple(checks))


def timeout(reason: str, checks=()) -> Outcome:
    return Outcome(0.0, "timeout", reason, tuple(checks))


def error(reason: str, checks=()) -> Outcome:
    return Outcome(0.0, "error", reason, tuple(checks))


@dataclass(frozen=True)
class VerifyOptions:
    """Per-service verifier options (a plain, picklable copy of the relevant config fields)."""

    math_last_box: bool = True
    """math: take the last `\\boxed{}` (True) or the first (False)."""
    if_reward: Literal["all", "fraction"] = "all"
    """if: reward 1 only when every instruction is followed (`all`) or the followed fraction."""
    if_mode: Literal["strict", "loose"] = "strict"
    """if: the IFEval mode whose result decides the reward."""
    code_timeout_s: float = 5.0
    """code / swe: wall-clock seconds for one sandboxed run."""


@dataclass
class Context:
    """What a verifier may use besides the task and response."""

    options: VerifyOptions = field(default_factory=VerifyOptions)
    sandbox: Any = None
    """A `services.common.sandbox.sandbox.Sandbox` (code, swe)."""
    reward_model: Any = None
    """A `services.reward.rm.RewardModel` (rlhf)."""


VerifyFn = Callable[[Any, str, Context], Outcome]


def need(task: Any, name: str, kind: type | tuple[type, ...]) -> Any:
    """The task attribute `name`, checked to be present and of `kind`; else InvalidArgument."""
    value = getattr(task, name, None)
    if value is None:
        raise InvalidArgument(name, f"required for domain {getattr(task, 'domain', '?')!r} but missing")
    if not isinstance(value, kind):
        raise InvalidArgument(name, f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value

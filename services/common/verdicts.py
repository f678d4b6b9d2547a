"""Verdicts: the one table between a verifier's verdict name and reward.proto's `Verdict` enum.

The reward service writes verdicts with `to_pb`; the orchestrator reads them back with `from_pb`
and asks `is_error` which samples to mask. An `error` verdict means the verifier itself failed:
the sample is left out of group statistics and the loss, never scored 0 (DESIGN.md section 3).
An unset enum value reads as `error`, so a reply from an older service is never taken as a score.
"""

from __future__ import annotations

from services.common.pb import reward_pb2

VERDICT_TO_PB: dict[str, int] = {
    "correct": reward_pb2.VERDICT_CORRECT,
    "incorrect": reward_pb2.VERDICT_INCORRECT,
    "invalid": reward_pb2.VERDICT_INVALID,
    "timeout": reward_pb2.VERDICT_TIMEOUT,
    "error": reward_pb2.VERDICT_ERROR,
}
PB_TO_VERDICT: dict[int, str] = {v: k for k, v in VERDICT_TO_PB.items()}
ERROR = "error"


def to_pb(verdict: str) -> int:
    """The enum value of verdict name `verdict` (KeyError for a name not in the table)."""
    return VERDICT_TO_PB[verdict]


def from_pb(value: int) -> str:
    """The verdict name of enum `value`; unset or unknown -> `error`."""
    return PB_TO_VERDICT.get(value, ERROR)


def is_error(verdict: str) -> bool:
    """The verifier failed on this sample: mask it, do not score it."""
    return verdict == ERROR

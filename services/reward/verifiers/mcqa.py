"""`mcqa`: the letter a response chose (`\\boxed{B}`, `Answer: B`, `(B)` at the end) against `ground_truth`.

This module knows nothing about gRPC or deadlines.
"""

from __future__ import annotations

import re
from typing import Any

from services.common.errors import InvalidArgument
from services.reward.verifiers.base import Check, Context, Outcome, correct, incorrect, invalid
from services.reward.verifiers.math import extract_boxed

_ANSWER = re.compile(r"answer\s*(?:is)?\s*[:：]?\s*\**\s*\(?([A-Z])\)?(?![A-Za-z])", re.IGNORECASE)
_LETTER = re.compile(r"^\s*(?:\\text\{)?\(?([A-Za-z])\)?\}?[.)]?\s*$")


def extract_choice(response: str) -> str | None:
    """The chosen letter, upper-cased: last `\\boxed{X}`, else last `Answer: X`, else a lone final letter."""
    for box in reversed(extract_boxed(response)):
        m = _LETTER.match(box)
        if m:
            return m.group(1).upper()
    hits = _ANSWER.findall(response)
    if hits:
        return hits[-1].upper()
    lines = [ln for ln in response.strip().splitlines() if ln.strip()]
    if lines:
        m = _LETTER.match(lines[-1])
        if m:
            return m.group(1).upper()
    return None


def mcqa_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """1 when the chosen letter equals the gold letter (case-insensitive)."""
    gold = getattr(task, "ground_truth", None)
    if not isinstance(gold, str) or not re.fullmatch(r"\s*\(?[A-Za-z]\)?\s*", gold):
        raise InvalidArgument("ground_truth", f"mcqa needs a single letter, got {gold!r}")
    gold = gold.strip().strip("()").upper()
    choice = extract_choice(response)
    if choice is None:
        return invalid("no chosen letter found (expected \\boxed{X} or 'Answer: X')")
    check = Check("choice", choice == gold, f"chose {choice}, gold {gold}")
    return correct(checks=[check]) if choice == gold else incorrect(f"chose {choice}, gold {gold}", [check])

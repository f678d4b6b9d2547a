"""`mcqa`: the letter a response chose (`\\boxed{B}`, `Answer: B`, `(B)` at the end) against `ground_truth`.

A response may also box the text of one option instead of its letter (`\\boxed{Paris}` when the
task's `choices` hold "B": "Paris"): it chose that option. Text that is no option's is a wrong
answer, not a missing one.

NeMo Gym rows (`options` + `expected_answer`) are graded by their own `grading_mode` instead
(`mcqa_grading.py`; strict by default: only a boxed letter counts). This module knows nothing about
gRPC or deadlines.
"""

from __future__ import annotations

import re
from typing import Any

from services.common.errors import InvalidArgument
from services.common.nemo_gym import mcqa_options
from services.reward.verifiers.base import Check, Context, Outcome, correct, incorrect, invalid
from services.reward.verifiers.math import extract_boxed
from services.reward.verifiers.mcqa_grading import GRADERS, custom_regex

_ANSWER = re.compile(r"answer\s*(?:is)?\s*[:：]?\s*\**\s*\(?([A-Z])\)?(?![A-Za-z])", re.IGNORECASE)
_LETTER = re.compile(r"^\s*(?:\\text\{)?\(?([A-Za-z])\)?\}?[.)]?\s*$")


def _norm(text: str) -> str:
    return " ".join(text.replace("\\text{", "").replace("}", "").split()).strip(" .").casefold()


def extract_choice(response: str, choices: dict[str, str] | None = None) -> str | None:
    """The chosen letter, upper-cased: the last `\\boxed{...}` holding a letter or (given `choices`)
    one option's text, else the last `Answer: X`, else a lone final letter. With `choices`, a boxed
    text that is no option's is an answer all the same, one that chose none: "?"."""
    texts = {_norm(v): k.upper() for k, v in (choices or {}).items()}
    for box in reversed(extract_boxed(response)):
        m = _LETTER.match(box)
        if m:
            return m.group(1).upper()
        if texts:
            return texts.get(_norm(box), "?")
    hits = _ANSWER.findall(response)
    if hits:
        return hits[-1].upper()
    lines = [ln for ln in response.strip().splitlines() if ln.strip()]
    if lines:
        m = _LETTER.match(lines[-1])
        if m:
            return m.group(1).upper()
    return None


def nemo_gym_mcqa(task: Any, response: str) -> Outcome:
    """NeMo Gym's rule: the letter its `grading_mode` reads from the response equals `expected_answer`."""
    options = mcqa_options(task.options)
    gold = (task.expected_answer or "").strip().upper()
    mode = task.grading_mode or "strict_single_letter_boxed"
    if mode not in GRADERS:
        raise InvalidArgument("grading_mode", f"{mode!r} is not one of {list(GRADERS)}")
    text = response.strip()
    template = (getattr(task, "model_extra", None) or {}).get("template_metadata") or {}
    patterns = template.get("output_regex") if isinstance(template, dict) else None
    choice = custom_regex(text, patterns, options) if text and patterns else None
    if choice is None and text:
        choice = GRADERS[mode](text, options)
    if choice is None:
        return invalid(f"no answer letter found ({mode})")
    check = Check("choice", choice == gold, f"chose {choice}, gold {gold} ({mode})")
    return correct(checks=[check]) if choice == gold else incorrect(f"chose {choice}, gold {gold}", [check])


def mcqa_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """1 when the chosen letter equals the gold letter (case-insensitive)."""
    if getattr(task, "expected_answer", None) is not None:
        return nemo_gym_mcqa(task, response)
    gold = getattr(task, "ground_truth", None)
    if not isinstance(gold, str) or not re.fullmatch(r"\s*\(?[A-Za-z]\)?\s*", gold):
        raise InvalidArgument("ground_truth", f"mcqa needs a single letter, got {gold!r}")
    gold = gold.strip().strip("()").upper()
    choice = extract_choice(response, getattr(task, "choices", None))
    if choice is None:
        return invalid("no chosen letter found (expected \\boxed{X} or 'Answer: X')")
    chose = "no option" if choice == "?" else choice
    check = Check("choice", choice == gold, f"chose {chose}, gold {gold}")
    return correct(checks=[check]) if choice == gold else incorrect(f"chose {chose}, gold {gold}", [check])

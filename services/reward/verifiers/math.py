"""`math`: the `\\boxed{}` answer of a response against `ground_truth`, compared by math-verify.

math-verify's own timeouts use `signal.alarm`, which only works in a main thread; they are turned
off here (`parsing_timeout=None`, `timeout_seconds=None`). The deadline is enforced by whoever
calls the verifier (the reward core runs it in a worker process it kills on time-out), so this
module is safe in threads. It knows nothing about that deadline or about gRPC.

A gold answer with several parts (`ground_truth` a list, e.g. `["3", "-2"]`) needs all of them: every
part must equal a different box of the response, or a single box must hold all parts as a set
(`\\boxed{3, -2}`).
"""

from __future__ import annotations

from typing import Any

from services.common.errors import InvalidArgument
from services.reward.verifiers.base import Check, Context, Outcome, correct, incorrect, invalid

_BOX_OPENERS = ("\\boxed", "\\fbox")


def extract_boxed(text: str) -> list[str]:
    """Contents of every `\\boxed{...}` / `\\fbox{...}` (braces balanced), in order of appearance.

    `\\boxed 5` (a single token without braces) is read as `5`.
    """
    out, i = [], 0
    while True:
        hits = [(text.find(o, i), o) for o in _BOX_OPENERS]
        hits = [(p, o) for p, o in hits if p >= 0]
        if not hits:
            return out
        pos, opener = min(hits)
        j = pos + len(opener)
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            depth, k = 0, j
            while k < len(text):
                depth += {"{": 1, "}": -1}.get(text[k], 0)
                if depth == 0:
                    break
                k += 1
            if depth != 0:
                return out  # an unclosed box ends the search
            out.append(text[j + 1 : k].strip())
            i = k + 1
        else:
            token = text[j:].split(maxsplit=1)
            if token and j > pos + len(opener):
                out.append(token[0].rstrip(".$"))
            i = j


def _silence_timeout_warnings() -> None:
    """math-verify warns once that its timeouts are off; our caller's deadline makes that moot."""
    import math_verify.grader
    import math_verify.parser

    math_verify.grader.TIMEOUT_WARNING_SHOWN = math_verify.parser.TIMEOUT_WARNING_SHOWN = True


def _parse(expr: str) -> list:
    from math_verify import parse

    _silence_timeout_warnings()
    return parse(f"\\boxed{{{expr}}}", parsing_timeout=None)


def answers_match(gold: str, pred: str) -> bool:
    """True when math-verify finds `pred` equivalent to `gold` (e.g. `\\frac{1}{2}` and `0.5`)."""
    from math_verify import verify

    gold_parsed, pred_parsed = _parse(gold), _parse(pred)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def _gold_parts(task: Any) -> list[str]:
    gt = getattr(task, "ground_truth", None)
    parts = gt if isinstance(gt, list) else [gt]
    if not parts or any(not isinstance(p, (str, int, float)) or str(p).strip() == "" for p in parts):
        raise InvalidArgument("ground_truth", f"math needs a non-empty answer string (or list), got {gt!r}")
    cleaned = []
    for p in parts:
        text = str(p).strip()
        inner = extract_boxed(text)
        text = inner[-1] if inner else text
        if not _parse(text):
            raise InvalidArgument("ground_truth", f"math-verify cannot parse the gold answer {p!r}")
        cleaned.append(text)
    return cleaned


def math_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """1 when the response's boxed answer equals `ground_truth` (all parts of it), else 0."""
    parts = _gold_parts(task)
    boxes = extract_boxed(response)
    if not boxes:
        return invalid("no \\boxed{} answer in the response")
    if len(parts) == 1:
        box = boxes[-1] if ctx.options.math_last_box else boxes[0]
        ok = answers_match(parts[0], box)
        check = Check("answer", ok, f"boxed {box!r} vs gold {parts[0]!r}")
        return correct(checks=[check]) if ok else incorrect(f"boxed {box!r} != gold {parts[0]!r}", [check])
    if len(boxes) == 1 and answers_match(", ".join(parts), boxes[0]):
        return correct(checks=[Check("answer", True, f"boxed set {boxes[0]!r}")])
    unused, checks = list(boxes), []
    for part in parts:
        hit = next((b for b in unused if answers_match(part, b)), None)
        if hit is not None:
            unused.remove(hit)
        checks.append(Check(f"part {part}", hit is not None, f"matched {hit!r}" if hit else "no box matches"))
    missing = [c.name for c in checks if not c.passed]
    return incorrect(f"missing {', '.join(missing)}", checks) if missing else correct(checks=checks)

"""`long_context`: a normalised exact or contained match of the answer against `ground_truth`.

Normalisation (SQuAD-style): lower-case, drop punctuation and the articles a/an/the, collapse
whitespace. The answer is the last `\\boxed{}` when there is one, else the text after a final
`Answer:`, else the whole response. Exact match or a gold contained in the answer scores 1.
`ground_truth` may be a list of acceptable answers. This module knows nothing about gRPC.
"""

from __future__ import annotations

import re
import string
from typing import Any

from services.common.errors import InvalidArgument
from services.reward.verifiers.base import Check, Context, Outcome, correct, incorrect, invalid
from services.reward.verifiers.math import extract_boxed

_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")


def normalize_answer(text: str) -> str:
    """lower → strip punctuation → drop articles → single spaces."""
    text = _PUNCT.sub(" ", text.lower())
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def extract_answer(response: str) -> str:
    boxes = extract_boxed(response)
    if boxes:
        return boxes[-1]
    parts = re.split(r"(?i)\banswer\s*[:：]", response)
    return parts[-1].strip() if len(parts) > 1 else response.strip()


def long_context_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """1 when the normalised answer equals, or contains, a normalised gold answer."""
    gt = getattr(task, "ground_truth", None)
    golds = gt if isinstance(gt, list) else [gt]
    if not golds or not all(isinstance(g, str) and normalize_answer(g) for g in golds):
        raise InvalidArgument("ground_truth", f"long_context needs a non-empty answer string, got {gt!r}")
    answer = normalize_answer(extract_answer(response))
    if not answer:
        return invalid("empty answer")
    for gold in map(normalize_answer, golds):
        if answer == gold or re.search(rf"\b{re.escape(gold)}\b", answer):
            how = "exact" if answer == gold else "contained"
            return correct(f"{how} match", [Check("match", True, how)])
    return incorrect(f"answer {answer[:80]!r} does not match {golds[0]!r}", [Check("match", False, "")])

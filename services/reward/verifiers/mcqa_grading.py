"""NeMo Gym's MCQA grading modes: how the chosen letter is read from a response, per `grading_mode`.

- `strict_single_letter_boxed` (the default): only the last `\\boxed{...}` counts; it must hold a lone
  letter (`E`, `(E)`, `\\text{E}`) or start with a letter and a delimiter (`E: text`, `C) text`).
  `Answer: E` without a box is no answer.
- `lenient_boxed`: as strict, else the box's text containing exactly one option's text picks it.
- `lenient_answer_colon`: the text after the first `Answer:`, a lone letter or one option's exact text.
- `lenient_answer_colon_md`: the last markdown-tolerant `**Answer:** ...` whose payload names one
  letter (a list such as `A or B` names none).
Every mode reads only letters the row's options offer. A row's own `template_metadata.output_regex`
(one pattern or a list) is tried before its mode (`custom_regex`). Pure functions; this module knows
nothing about rewards or tasks.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_ONLY_LETTER = re.compile(r"[^A-Za-z]*([A-Z])[^A-Za-z]*\Z")
_LABELLED = re.compile(r"\s*([A-Z])\s*[:).\-]")
_TEXT_WRAP = re.compile(r"\\text\{\s*(.*?)\s*\}", re.S)
_ANSWER_COLON = re.compile(r"answer\s*:\s*(.+)", re.I)
_ANSWER_COLON_MD = re.compile(r"[*_]{0,2}Answer[*_]{0,2}\s*:[*_\s]{0,2}(.+)", re.I | re.M)
_LONE_LETTER = re.compile(r"(?<![A-Za-z])([A-Za-z])(?![A-Za-z])")
_LIST_SEPARATOR = re.compile(r"(?:\s*[/|&,;]\s*|\s+(?:or|and)\s+|\s+)", re.I)
_LEADING = re.compile(r"([a-zA-Z])(?![a-zA-Z0-9])")
_LAST_CAPITAL = re.compile(r"\b[A-Z]\b(?!.*\b[A-Z]\b)", re.S)
_FULLWIDTH = str.maketrans({"Ａ": " A", "Ｂ": " B", "Ｃ": " C", "Ｄ": " D", "أ": " A", "ب": " B", "ج": " C", "د": " D",
                            "অ": " A", "ব": " B", "ড": " C", "ঢ": " D"})

Grader = Callable[[str, dict[str, str]], "str | None"]


def last_boxed(text: str) -> str | None:
    """What the last `\\boxed{` holds, braces counted (so `\\boxed{\\text{E}}` gives `\\text{E}`); None if absent or unclosed."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def unwrap_text(s: str) -> str:
    """`s` without any number of whole-string `\\text{...}` wrappers."""
    while (m := _TEXT_WRAP.fullmatch(s)) is not None:
        s = m.group(1)
    return s


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def strict_boxed(text: str, options: dict[str, str]) -> str | None:
    inner = last_boxed(text)
    if inner is None:
        return None
    inner = unwrap_text(inner.strip())
    m = _ONLY_LETTER.match(inner) or _LABELLED.match(inner)
    letter = m.group(1).upper() if m else None
    return letter if letter in options else None


def lenient_boxed(text: str, options: dict[str, str]) -> str | None:
    letter = strict_boxed(text, options)
    if letter is not None:
        return letter
    inner = last_boxed(text)
    if inner is None:
        return None
    candidates = [_norm(inner.strip()), _norm(unwrap_text(inner.strip()))]
    hits = {k for k, v in options.items() if _norm(v) and any(_norm(v) in c for c in candidates)}
    return hits.pop() if len(hits) == 1 else None


def answer_colon(text: str, options: dict[str, str]) -> str | None:
    m = _ANSWER_COLON.search(text)
    if m is None:
        return None
    payload = unwrap_text(m.group(1)).strip()
    if len(payload) == 1 and payload.isalpha() and payload.upper() in options:
        return payload.upper()
    return next((k for k, v in options.items() if _norm(v) == _norm(payload)), None)


def _names_several(payload: str, options: dict[str, str]) -> bool:
    """Whether the payload lists two different offered letters side by side (`A or B`, `A, C`)."""
    found = [(m.group(1).upper(), m.span(1)) for m in _LONE_LETTER.finditer(payload) if m.group(1).upper() in options]
    return any(a != b and _LIST_SEPARATOR.fullmatch(payload[sa[1] : sb[0]]) for (a, sa), (b, sb) in zip(found, found[1:]))


def answer_colon_md(text: str, options: dict[str, str]) -> str | None:
    for payload in reversed(_ANSWER_COLON_MD.findall(text)):
        cand = payload.translate(_FULLWIDTH).strip().strip("*_` \t\n\r.,;:")
        if _names_several(cand, options):
            continue
        if len(cand) == 1:
            letter = cand
        else:
            m = _LEADING.match(cand) or _LAST_CAPITAL.search(cand)
            letter = m.group(1) if m and m.re is _LEADING else (m.group(0) if m else None)
        if letter and letter.upper() in options:
            return letter.upper()
    return None


def custom_regex(text: str, patterns: str | list[str], options: dict[str, str]) -> str | None:
    """The row's own answer pattern(s), first that reads an answer: the last match, case-insensitive; a
    lone letter is taken as is (the pattern is trusted), else an option's exact text picks its letter."""
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        try:
            found = re.findall(pattern, text, re.IGNORECASE)
        except re.error:
            continue
        if not found:
            continue
        last = found[-1] if isinstance(found[-1], str) else next((g for g in found[-1] if g), "")
        captured = last.strip().translate(_FULLWIDTH).strip().upper()
        if len(captured) == 1 and captured.isalpha():
            return captured
        hit = next((k for k, v in options.items() if _norm(v) == _norm(captured)), None)
        if hit is not None:
            return hit
    return None


GRADERS: dict[str, Grader] = {
    "strict_single_letter_boxed": strict_boxed,
    "lenient_boxed": lenient_boxed,
    "lenient_answer_colon": answer_colon,
    "lenient_answer_colon_md": answer_colon_md,
}

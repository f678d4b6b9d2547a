"""The 25 IFEval instruction checks, keyed by IFEval's instruction ids, with IFEval's kwargs names.

Each check is `fn(response, kwargs) -> bool`; `REQUIRED[id]` lists the kwargs it needs. Sentences
and words are split with small regexes of our own (no nltk data), language detection is langdetect
with a fixed seed. Written from the published semantics of IFEval (Zhou et al., 2023); this module
knows nothing about strict/loose modes or rewards (see `ifeval.py`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

Check = Callable[[str, dict], bool]
CHECKS: dict[str, Check] = {}
REQUIRED: dict[str, tuple[str, ...]] = {}
RELATIONS = ("less than", "at least")

_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s|$)")
_ABBREVIATIONS = frozenset(["mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "a.m", "p.m", "inc", "ltd", "co", "fig"])


def check(instruction_id: str, *required: str):
    """Register a check under its IFEval instruction id."""

    def register(fn: Check) -> Check:
        CHECKS[instruction_id] = fn
        REQUIRED[instruction_id] = required
        return fn

    return register


def compare(count: int, relation: str, n: int) -> bool:
    """IFEval's relations: `less than` is count < n, `at least` is count >= n."""
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    return count < n if relation == "less than" else count >= n


def count_words(text: str) -> int:
    """Runs of word characters (`\\w+`), as IFEval's regexp word tokenizer counts them."""
    return len(_WORD.findall(text))


def count_sentences(text: str) -> int:
    """Sentences: text up to `.`, `!` or `?` and a space or the end; `Dr.`, `e.g.` and initials stay inside."""
    count, start = 0, 0
    for m in _SENTENCE_END.finditer(text):
        before = text[start : m.start()].split()
        last = before[-1].lower().rstrip(".") if before else ""
        if m.group(0).startswith(".") and (last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha())):
            continue
        if text[start : m.start()].strip():
            count += 1
        start = m.end()
    return count + (1 if text[start:].strip() else 0)


def detect_language(text: str) -> str | None:
    """ISO 639-1 code from langdetect with a fixed seed; None when it cannot tell."""
    from langdetect import DetectorFactory, LangDetectException, detect

    DetectorFactory.seed = 0
    try:
        return detect(text)
    except LangDetectException:
        return None


@check("keywords:existence", "keywords")
def _existence(r, kw):
    return all(re.search(re.escape(k), r, re.IGNORECASE) for k in kw["keywords"])


@check("keywords:frequency", "keyword", "frequency", "relation")
def _frequency(r, kw):
    return compare(len(re.findall(re.escape(kw["keyword"]), r, re.IGNORECASE)), kw["relation"], int(kw["frequency"]))


@check("keywords:forbidden_words", "forbidden_words")
def _forbidden(r, kw):
    return not any(re.search(r"\b" + re.escape(w) + r"\b", r, re.IGNORECASE) for w in kw["forbidden_words"])


@check("keywords:letter_frequency", "letter", "let_frequency", "let_relation")
def _letter(r, kw):
    return compare(r.lower().count(kw["letter"].lower()), kw["let_relation"], int(kw["let_frequency"]))


@check("language:response_language", "language")
def _language(r, kw):
    found = detect_language(r)
    return found is None or found == kw["language"]  # undecidable text is not held against it


@check("length_constraints:number_sentences", "num_sentences", "relation")
def _sentences(r, kw):
    return compare(count_sentences(r), kw["relation"], int(kw["num_sentences"]))


@check("length_constraints:number_paragraphs", "num_paragraphs")
def _paragraphs(r, kw):
    parts = re.split(r"\s?\*\*\*\s?", r)
    inner_empty = any(not p.strip() for p in parts[1:-1])
    return not inner_empty and sum(1 for p in parts if p.strip()) == int(kw["num_paragraphs"])


@check("length_constraints:number_words", "num_words", "relation")
def _words(r, kw):
    return compare(count_words(r), kw["relation"], int(kw["num_words"]))


@check("length_constraints:nth_paragraph_first_word", "num_paragraphs", "nth_paragraph", "first_word")
def _nth_first_word(r, kw):
    parts = re.split(r"\n\n", r)
    if sum(1 for p in parts if p.strip()) != int(kw["num_paragraphs"]):
        return False
    nth = int(kw["nth_paragraph"])
    if not 1 <= nth <= len(parts) or not parts[nth - 1].split():
        return False
    word = parts[nth - 1].split()[0].lstrip("'\"")
    first = re.match(r"[^.,?!'\"]*", word).group(0).lower()
    return first == kw["first_word"].lower()


@check("detectable_content:number_placeholders", "num_placeholders")
def _placeholders(r, kw):
    return len(re.findall(r"\[.*?\]", r)) >= int(kw["num_placeholders"])


@check("detectable_content:postscript", "postscript_marker")
def _postscript(r, kw):
    marker = kw["postscript_marker"].strip()
    if marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + re.escape(marker.lower()) + r".*$"
    return bool(re.findall(pattern, r.lower(), re.MULTILINE))


@check("detectable_format:number_bullet_lists", "num_bullets")
def _bullets(r, kw):
    stars = re.findall(r"^\s*\*[^\*].*$", r, re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", r, re.MULTILINE)
    return len(stars) + len(dashes) == int(kw["num_bullets"])


@check("detectable_format:constrained_response")
def _constrained(r, kw):
    return any(opt in r.strip() for opt in ("My answer is yes.", "My answer is no.", "My answer is maybe."))


@check("detectable_format:number_highlighted_sections", "num_highlights")
def _highlights(r, kw):
    single = [h for h in re.findall(r"\*[^\n\*]*\*", r) if h.strip("*").strip()]
    double = [h for h in re.findall(r"\*\*[^\n\*]*\*\*", r) if h[2:-2].strip()]
    return len(single) + len(double) >= int(kw["num_highlights"])


@check("detectable_format:multiple_sections", "section_spliter", "num_sections")
def _sections(r, kw):
    parts = re.split(r"\s?" + re.escape(kw["section_spliter"].strip()) + r"\s?\d+\s?", r)
    return len(parts) - 1 >= int(kw["num_sections"])


@check("detectable_format:json_format")
def _json(r, kw):
    text = re.sub(r"^```(?:json|Json|JSON)?\s*|\s*```$", "", r.strip())
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@check("detectable_format:title")
def _title(r, kw):
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", r))


@check("combination:two_responses")
def _two(r, kw):
    parts = r.split("******")
    kept = []
    for i, p in enumerate(parts):
        if not p.strip():
            if 0 < i < len(parts) - 1:
                return False
            continue
        kept.append(p.strip())
    return len(kept) == 2 and kept[0] != kept[1]


@check("combination:repeat_prompt", "prompt_to_repeat")
def _repeat(r, kw):
    return r.strip().lower().startswith(kw["prompt_to_repeat"].strip().lower())


@check("startend:end_checker", "end_phrase")
def _end(r, kw):
    return r.strip().strip('"').lower().endswith(kw["end_phrase"].strip().lower())


@check("change_case:capital_word_frequency", "capital_frequency", "capital_relation")
def _capitals(r, kw):
    caps = [w for w in re.findall(r"\w+(?:'\w+)?", r) if w.isupper()]
    return compare(len(caps), kw["capital_relation"], int(kw["capital_frequency"]))


@check("change_case:english_capital")
def _upper(r, kw):
    return r.isupper() and detect_language(r) in ("en", None)


@check("change_case:english_lowercase")
def _lower(r, kw):
    return r.islower() and detect_language(r) in ("en", None)


@check("punctuation:no_comma")
def _no_comma(r, kw):
    return "," not in r


@check("startend:quotation")
def _quotation(r, kw):
    r = r.strip()
    return len(r) > 1 and r[0] == '"' and r[-1] == '"'


IFEVAL_IDS = frozenset(CHECKS)
"""IFEval's own 25 ids (`verifiable_checks.py` adds IF-RL's others to `CHECKS`)."""

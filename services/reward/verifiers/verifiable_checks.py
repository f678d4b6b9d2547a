"""The instruction checks IF-RL uses beyond IFEval's 25: the verifiable-instructions set NeMo Gym's
`instruction_following` server scores (`paragraphs:paragraphs`, `first_word:first_word_sent`,
`last_word:last_word_answer`, `copy:*`, `count:*`, `letters:*`, ...), with that set's kwargs names.

Registered into the same table as IFEval's checks (`ifeval_checks.CHECKS`), each a
`fn(response, kwargs) -> bool`. Written from the published semantics of each instruction; where a
rule is odd (a keyword matched as a substring, a sentence's first word compared with its
punctuation) it is kept, because the reward must agree with NeMo Gym's. Sentences are split by
`split_sentences`, words by `tokenize` (our own small regexes standing in for nltk, no data files).
This module knows nothing about strict / loose modes or rewards.
"""

from __future__ import annotations

import re

from services.reward.verifiers.ifeval_checks import CHECKS, REQUIRED, check, compare

_NO_BREAK_BEFORE = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|St|Inc|Ltd|Jr|Sr|Co|Ph\.D)|(?<![A-Za-z])[A-Za-z]|\b[A-Za-z]\.[A-Za-z])\Z")
_WEBSITE_AFTER = re.compile(r"(?:com|net|org|io|gov|edu|me)\b")
_TOKEN = re.compile(r"\d+(?:[.,]\d+)+|\w+(?:-\w+)*(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\w+(?:-\w+)*|\.\.\.|[^\w\s]", re.I)
_CLOSERS = "\"”'"


def split_sentences(text: str) -> list[str]:
    """Sentences, ending after `!`, `?`, a `.` or a run of dots; a `.` after a title (`Dr.`), an initial
    (`J.`), inside a number (`3.5`) or an acronym (`U.S.`) or before a web suffix (`.com`) does not
    end one. A closing quote right after the mark stays in the sentence. Newlines are spaces."""
    text = text.replace("\n", " ")
    out, start, i = [], 0, 0
    while i < len(text):
        ch = text[i]
        end = None
        if ch in "!?":
            end = i + 1
        elif ch == ".":
            j = i
            while j < len(text) and text[j] == ".":
                j += 1
            if j - i >= 2:
                end = j
            elif not (
                (i > 0 and text[i - 1].isdigit() and j < len(text) and text[j].isdigit())
                or _NO_BREAK_BEFORE.search(text[start:i])
                or _WEBSITE_AFTER.match(text, j)
            ):
                end = j
            i = j - 1
        if end is not None:
            while end < len(text) and text[end] in _CLOSERS and (end + 1 == len(text) or text[end + 1].isspace()):
                end += 1
            out.append(text[start:end].strip())
            start = end
            i = end
            continue
        i += 1
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def tokenize(text: str) -> list[str]:
    """Words and punctuation marks as separate tokens (`don't` -> `do`, `n't`; `well-known` stays one)."""
    return _TOKEN.findall(text)


def _paragraphs(text: str, divider: str) -> list[str] | None:
    """Paragraphs between dividers; empty ones only at the ends (dropped); an empty inner one -> None."""
    parts = re.split(divider, text)
    kept = []
    for i, part in enumerate(parts):
        if not part.strip():
            if 0 < i < len(parts) - 1:
                return None
            continue
        kept.append(part)
    return kept


def _same_text(a: str, b: str) -> bool:
    return a.strip().lower() == b.strip().lower()


@check("paragraphs:paragraphs")
def _two_paragraphs_stars(r, kw):
    kept = _paragraphs(r, r"\s?\*\*\*\s?")
    return kept is not None and len(kept) == 2


@check("paragraphs:paragraphs2")
def _two_paragraphs_blank_line(r, kw):
    kept = _paragraphs(r, r"\n\n")
    return kept is not None and len(kept) == 2


@check("first_word:first_word_sent", "first_word")
def _first_word_each_sentence(r, kw):
    want = _word_arg(kw["first_word"]).lower()
    return all(s.split() and s.split()[0].lower() == want for s in split_sentences(r))


@check("first_word:first_word_answer", "first_word")
def _first_word_answer(r, kw):
    words = r.split()
    return bool(words) and words[0].lower() == _word_arg(kw["first_word"]).lower()


@check("last_word:last_word_sent", "last_word")
def _last_word_each_sentence(r, kw):
    want = _word_arg(kw["last_word"]).lower()
    return all(s.split() and re.sub(r"[^\w\s]", "", s.split()[-1]).lower() == want for s in split_sentences(r))


@check("last_word:last_word_answer", "last_word")
def _last_word_answer(r, kw):
    words = r.split()
    return bool(words) and re.sub(r"[^\w\s]", "", words[-1]).lower() == _word_arg(kw["last_word"]).lower()


def _word_arg(value) -> str:
    return (value[0] if isinstance(value, list) and value else str(value)).strip()


@check("copy:repeat_phrase", "phrase", "small_n")
def _repeat_phrase(r, kw):
    ref = kw["phrase"].strip().split()
    if not ref:
        return False
    found = re.findall(rf"{re.escape(ref[0])} .*? {re.escape(ref[-1])}", r)
    if len(found) != int(kw["small_n"]):
        return False
    diffs = 0
    for phrase in found:
        words = phrase.split()
        if len(words) != len(ref):
            return False
        diffs = sum(a != b for a, b in zip(words, ref))
        if diffs > 1:
            return False
    return diffs == 1  # each repetition changes at most one word, the last exactly one


@check("copy:copy", "prompt_to_repeat")
def _copy(r, kw):
    return _same_text(r, kw["prompt_to_repeat"])


@check("copy:copying_simple", "prompt_to_repeat")
def _copying_simple(r, kw):
    return _same_text(r, kw["prompt_to_repeat"])


@check("copy:copying_multiple", "prompt_to_repeat", "N")
def _copying_multiple(r, kw):
    copies = r.split("******")
    return len(copies) == int(kw["N"]) and all(_same_text(c, kw["prompt_to_repeat"]) for c in copies)


@check("new:copy_span_idx", "prompt_to_repeat", "n_start", "n_end")
def _copy_span(r, kw):
    return _same_text(r, kw["prompt_to_repeat"][int(kw["n_start"]) : int(kw["n_end"])])


@check("detectable_format:sentence_hyphens")
def _sentence_hyphens(r, kw):
    pieces, sentences = r.split("-"), split_sentences(r.replace("-", " "))
    return all(p == p.strip() and p == s for p, s in zip(pieces, sentences))


@check("detectable_format:square_brackets")
def _square_brackets(r, kw):
    return all(w.startswith("[") and w.endswith("]") for w in r.split())


@check("detectable_format:bigram_wrapping")
def _bigram_wrapping(r, kw):
    w = r.split()
    return all(w[i].startswith("<<") and w[i + 1].endswith(">>") for i in range(0, len(w) - 1, 2))


@check("keywords:no_adjacent_consecutive")
def _no_adjacent_consecutive(r, kw):
    w = r.split()
    return not any(ord(b[0].lower()) - ord(a[0].lower()) == 1 for a, b in zip(w, w[1:]))


def _occurrences(keyword: str, text: str) -> int:
    """Case-insensitive occurrences of `keyword` anywhere (inside longer words too)."""
    return len(re.findall(re.escape(keyword.strip()), text, re.IGNORECASE))


@check("keywords:word_once", "keyword")
def _word_once(r, kw):
    return _occurrences(kw["keyword"], r) == 1


@check("keywords:word_count_different_numbers", "keyword", "frequency", "relation")
def _word_count(r, kw):
    return compare(_occurrences(kw["keyword"], r), kw["relation"], int(kw["frequency"]))


@check("keywords:exclude_word_harder", "keyword")
def _exclude_word(r, kw):
    return f" {kw['keyword'].strip()} " not in r


@check("count:count_increment_word", "keyword1", "keyword2")
def _increment_words(r, kw):
    return _occurrences(kw["keyword1"], r) == 1 and _occurrences(kw["keyword2"], r) == 2


@check("keywords:palindrome")
def _palindrome(r, kw):
    return any(w == w[::-1] for w in r.split())


@check("keywords:keyword_specific_position", "keyword", "n", "m")
def _keyword_position(r, kw):
    sentences, n, m = split_sentences(r), int(kw["n"]), int(kw["m"])
    if not 1 <= n <= len(sentences):
        return False
    words = tokenize(sentences[n - 1])
    return 1 <= m <= len(words) and words[m - 1] == _word_arg(kw["keyword"])


@check("keywords:start_end")
def _start_end(r, kw):
    words = tokenize(r)
    return len(words) >= 2 and words[0].lower() == words[-1].lower()


@check("punctuation:punctuation_dot")
def _no_dot(r, kw):
    return "." not in r


@check("punctuation:punctuation_exclamation")
def _no_exclamation(r, kw):
    return "!" not in r


@check("count:lowercase_counting", "N")
def _lowercase_words(r, kw):
    return len(re.findall(r"\b[a-z]+\b", r)) <= int(kw["N"])


@check("letters:letter_counting", "N", "relation")
def _letters(r, kw):
    return compare(len(re.findall(r"[a-zA-Z]", r)), kw["relation"], int(kw["N"]))


CHECKS["letters:letter_counting2"] = CHECKS["keywords:letter_frequency"]  # the same rule under a second id
REQUIRED["letters:letter_counting2"] = REQUIRED["keywords:letter_frequency"]


@check("count:counting_composition", "n_sent", "n_words")
def _composition(r, kw):
    parts = re.split(r"\s?\*\*\*\s?", r)
    if _paragraphs(r, r"\s?\*\*\*\s?") is None:
        return False
    for part in parts:  # every part, an empty end part too, must hold n_sent sentences
        sentences = split_sentences(part)
        if len(sentences) != int(kw["n_sent"]) or any(len(tokenize(s)) != int(kw["n_words"]) for s in sentences):
            return False
    return sum(1 for p in parts if p.strip()) == 3


@check("count:count_unique")
def _unique_words(r, kw):
    words = tokenize(r)
    return len(words) == len(set(words))

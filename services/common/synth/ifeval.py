"""Synthetic instruction following (domain "if"): "Write about X." plus 1-3 IFEval instructions.

The level is the number of instructions. Ids and kwargs follow IFEval exactly (kwargs names such
as `keywords`, `num_words` + `relation`, `end_phrase`, `postscript_marker`, `num_bullets`); the
subset below is one a tiny model can learn (not `change_case:english_capital`: IFEval also asks
langdetect for English, which misreads short all-caps text). Instructions are drawn so that they never conflict
(at most one per group; a few pairs excluded), and the SFT answer is built to satisfy all of them:
content sentences first (no commas ever), then the format, then the ending, then the case; word
limits and forbidden words are chosen from the finished answer. This module knows nothing about
files or verifiers.
"""

from __future__ import annotations

import json
import random
import re

from services.common.synth.base import (
    ADJECTIVES,
    TOPICS,
    pick_level,
    sft_record,
    task_records,
    user,
    with_thinking,
)
from services.common.tasks import TaskRecord

DOMAIN = "if"
# instruction id -> group; at most one instruction per group except "content"
GROUPS = {
    "keywords:existence": "content",
    "keywords:forbidden_words": "content",
    "punctuation:no_comma": "content",
    "length_constraints:number_words": "count",
    "length_constraints:number_sentences": "count",
    "detectable_format:number_bullet_lists": "format",
    "detectable_format:multiple_sections": "format",
    "detectable_format:number_highlighted_sections": "format",
    "detectable_format:title": "format",
    "detectable_format:json_format": "format",
    "startend:quotation": "format",
    "startend:end_checker": "end",
    "detectable_content:postscript": "end",
    "change_case:english_lowercase": "case",
}
INSTRUCTION_IDS = tuple(GROUPS)
_CONFLICTS = {  # pairs of (id or group) that cannot be satisfied together
    frozenset({"detectable_format:json_format", "end"}),
    frozenset({"startend:quotation", "end"}),
    frozenset({"detectable_format:multiple_sections", "case"}),
    frozenset({"length_constraints:number_sentences", "format"}),
    frozenset({"length_constraints:number_sentences", "end"}),
}
END_PHRASES = ["Is there anything else I can help with?", "Have a nice day.", "That is all."]
_SENTENCES = [  # phrasings langdetect reliably reads as English, even lower-cased
    "I think {t} is {a}.",
    "Many people find {t} {a}.",
    "We saw {t} and it was {a}.",
    "It is good when {t} is {a}.",
    "I really like {t} because it is {a}.",
    "You can see that {t} is {a}.",
    "Everyone agrees that {t} is {a}.",
]


def _clash(a: str, b: str) -> bool:
    keys_a, keys_b = {a, GROUPS[a]}, {b, GROUPS[b]}
    return (
        (GROUPS[a] == GROUPS[b] != "content")
        or a == b
        or any(frozenset({x, y}) in _CONFLICTS for x in keys_a for y in keys_b)
    )


def pick_instructions(rng: random.Random, level: int) -> list[str]:
    """`level` mutually compatible instruction ids."""
    chosen: list[str] = []
    while len(chosen) < level:
        candidate = rng.choice(INSTRUCTION_IDS)
        if not any(_clash(candidate, c) for c in chosen):
            chosen.append(candidate)
    return chosen


def count_words(text: str) -> int:
    """Words as IFEval counts them: runs of \\w characters."""
    return len(re.findall(r"\w+", text))


def make_problem(rng: random.Random, level: int) -> tuple[str, list[str], list[dict], str]:
    """(prompt, instruction ids, kwargs, an answer that satisfies every instruction)."""
    ids = pick_instructions(rng, level)
    topic = rng.choice(TOPICS)
    kw: dict[str, dict] = {i: {} for i in ids}
    if "detectable_format:number_bullet_lists" in ids:
        n = rng.randint(2, 4)
    elif "detectable_format:multiple_sections" in ids:
        n = rng.randint(2, 3)
    else:  # lowercase answers get 2+ sentences: langdetect (used by IFEval's case checks) misreads one
        n = rng.randint(2 if "change_case:english_lowercase" in ids else 1, 3)
    adjectives = [rng.choice(ADJECTIVES) for _ in range(n)]
    if "keywords:existence" in ids:
        kw["keywords:existence"] = {"keywords": [adjectives[0]]}
    sents = [
        s.format(t=topic, T=topic[0].upper() + topic[1:], a=a)
        for s, a in zip(rng.sample(_SENTENCES, n), adjectives)
    ]
    body = " ".join(sents)
    if "detectable_format:number_bullet_lists" in ids:
        body, kw["detectable_format:number_bullet_lists"] = (
            "\n".join(f"* {s}" for s in sents),
            {"num_bullets": n},
        )
    elif "detectable_format:multiple_sections" in ids:
        body = "\n\n".join(f"Section {k + 1}\n{s}" for k, s in enumerate(sents))
        kw["detectable_format:multiple_sections"] = {"section_spliter": "Section", "num_sections": n}
    elif "detectable_format:number_highlighted_sections" in ids:
        k = rng.randint(1, n)
        body = " ".join(f"*{s}*" if j < k else s for j, s in enumerate(sents))
        kw["detectable_format:number_highlighted_sections"] = {"num_highlights": k}
    elif "detectable_format:title" in ids:
        body = f"<<About {topic.title()}>>\n{body}"
    elif "detectable_format:json_format" in ids:
        body = json.dumps({"answer": body})
    elif "startend:quotation" in ids:
        body = f'"{body}"'
    if "startend:end_checker" in ids:
        phrase = rng.choice(END_PHRASES)
        body, kw["startend:end_checker"] = f"{body}\n{phrase}", {"end_phrase": phrase}
    elif "detectable_content:postscript" in ids:
        body += f"\n\nP.S. I like {topic} too."
        kw["detectable_content:postscript"] = {"postscript_marker": "P.S."}
    if "change_case:english_lowercase" in ids:
        body = body.lower()
    if "keywords:forbidden_words" in ids:
        absent = [w for w in ADJECTIVES if not re.search(rf"\b{w}\b", body, re.IGNORECASE)]
        kw["keywords:forbidden_words"] = {"forbidden_words": rng.sample(absent, 2)}
    if "length_constraints:number_words" in ids:
        words = count_words(body)
        kw["length_constraints:number_words"] = rng.choice(
            [
                {"num_words": max(1, words - rng.randint(0, 3)), "relation": "at least"},
                {"num_words": words + rng.randint(1, 4), "relation": "less than"},
            ]
        )
    if "length_constraints:number_sentences" in ids:
        kw["length_constraints:number_sentences"] = rng.choice(
            [
                {"num_sentences": max(1, n - rng.randint(0, 1)), "relation": "at least"},
                {"num_sentences": n + rng.randint(1, 2), "relation": "less than"},
            ]
        )
    kwargs = [kw[i] for i in ids]
    prompt = " ".join([f"Write about {topic}."] + [describe(i, k) for i, k in zip(ids, kwargs)])
    return prompt, ids, kwargs, body


def describe(iid: str, k: dict) -> str:
    """The instruction as the prompt states it."""
    texts = {
        "keywords:existence": lambda: f"Include the word {k.get('keywords', [''])[0]}.",
        "keywords:forbidden_words": lambda: (
            f"Do not use the words {' or '.join(k.get('forbidden_words', []))}."
        ),
        "punctuation:no_comma": lambda: "Do not use any commas.",
        "length_constraints:number_words": lambda: (
            f"Answer with {k.get('relation')} {k.get('num_words')} words."
        ),
        "length_constraints:number_sentences": lambda: (
            f"Answer with {k.get('relation')} {k.get('num_sentences')} sentences."
        ),
        "detectable_format:number_bullet_lists": lambda: (
            f"Use exactly {k.get('num_bullets')} bullet points like * this."
        ),
        "detectable_format:multiple_sections": lambda: (
            f"Write {k.get('num_sections')} sections and start each with Section X."
        ),
        "detectable_format:number_highlighted_sections": lambda: (
            f"Highlight at least {k.get('num_highlights')} parts with *stars*."
        ),
        "detectable_format:title": lambda: "Give it a title in double angular brackets like <<title>>.",
        "detectable_format:json_format": lambda: "Wrap your whole answer in JSON format.",
        "startend:quotation": lambda: "Wrap your whole answer in double quotes.",
        "startend:end_checker": lambda: f'End your answer with the exact phrase "{k.get("end_phrase")}"',
        "detectable_content:postscript": lambda: (
            f"At the end add a postscript that starts with {k.get('postscript_marker')}"
        ),
        "change_case:english_lowercase": lambda: "Use only lowercase letters.",
    }
    return texts[iid]()


def make_tasks(rng: random.Random, n: int, split: str) -> list[TaskRecord]:
    def fields(rng: random.Random, level: int) -> dict:
        prompt, ids, kwargs, _ = make_problem(rng, level)
        return dict(
            messages=[user(prompt)],
            instruction_id_list=ids,
            kwargs=kwargs,
        )

    return task_records(rng, n, split, DOMAIN, fields)


def make_sft(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        level = pick_level(rng, "sft")
        prompt, ids, kwargs, answer = make_problem(rng, level)
        rules = ", ".join(iid.split(":")[1].replace("_", " ") for iid in ids)
        text, thinking = with_thinking(rng, f"Rules: {rules}.", answer)
        out.append(
            sft_record(
                DOMAIN,
                i,
                [user(prompt)],
                text,
                level,
                correct=True,
                thinking=thinking,
                instruction_id_list=ids,
                kwargs=kwargs,
            )
        )
    return out

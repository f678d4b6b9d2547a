"""Synthetic RLHF: short chat prompts and preference pairs (helpful, polite, on-topic vs not).

RL tasks carry only the prompt (a reward model scores the answer). Preference records add
`chosen` (polite and about the asked topic) and `rejected`, whose flaw depends on the level:
level 1 empty or rude, level 2 off-topic, level 3 polite but curt or about a neighbouring topic.
This module knows nothing about files or reward models.
"""

from __future__ import annotations

import random

from services.common.synth.base import ADJECTIVES, NAMES, TOPICS, pick_level, sft_record, task_records, user
from services.common.tasks import TaskRecord

DOMAIN = "rlhf"
# prompt template -> chosen-answer template; {t} topic, {T} capitalised topic, {a}/{b} adjectives, {n} name
TEMPLATES = [
    ("Tell me about {t}.", "Sure! {T} is {a} and {b}. I hope this helps."),
    ("Can you describe {t}?", "Of course. {T} is {a} and {b}."),
    ("Write one nice sentence about {t}.", "{T} is {a} and lovely."),
    ("What do you think of {t}?", "I think {t} is {a} and {b}."),
    ("Give me a tip about {t}.", "Here is a tip: enjoy {t} when it is {a}."),
    ("Why do people like {t}?", "Many people like {t} because it is {a} and {b}."),
]
RUDE = ["No. Ask someone else.", "That is a stupid question.", "I do not care about that.", "Go away."]


def make_problem(rng: random.Random) -> tuple[str, str, dict]:
    """(prompt, chosen answer, the filled slots)."""
    prompt_t, answer_t = rng.choice(TEMPLATES)
    topic = rng.choice(TOPICS)
    a, b = rng.sample(ADJECTIVES, 2)
    slots = {
        "t": topic,
        "T": topic[0].upper() + topic[1:],
        "a": a,
        "b": b,
        "n": rng.choice(NAMES).capitalize(),
    }
    prompt, chosen = prompt_t.format(**slots), answer_t.format(**slots)
    if rng.random() < 0.5:  # a greeting: the chosen answer greets back by name
        prompt, chosen = f"Hi, I am {slots['n']}. {prompt}", f"Hi {slots['n']}! {chosen}"
    return prompt, chosen, slots


def make_rejected(rng: random.Random, level: int, slots: dict) -> str:
    """A worse answer; how much worse depends on `level` (1 = obviously, 3 = subtly)."""
    if level == 1:
        return rng.choice(["", *RUDE])
    other = rng.choice([t for t in TOPICS if t != slots["t"]])
    if level == 2:
        return f"I would rather talk about {other}. {other[0].upper() + other[1:]} is {slots['a']}."
    return rng.choice(["Ok.", f"{slots['T']}.", f"Sure. {other[0].upper() + other[1:]} is {slots['a']}."])


def make_tasks(rng: random.Random, n: int, split: str) -> list[TaskRecord]:
    def fields(rng: random.Random, level: int) -> dict:
        prompt, _, _ = make_problem(rng)
        return dict(
            messages=[user(prompt)],
        )

    return task_records(rng, n, split, DOMAIN, fields)


def make_preferences(rng: random.Random, n: int, split: str = "train") -> list[TaskRecord]:
    """Preference pairs for reward-model training (`chosen` better than `rejected`)."""
    out = []
    for i in range(n):
        level = pick_level(rng, split)
        prompt, chosen, slots = make_problem(rng)
        out.append(
            TaskRecord(
                id=f"{DOMAIN}-pref-{i:05d}",
                domain=DOMAIN,
                messages=[user(prompt)],
                chosen=chosen,
                rejected=make_rejected(rng, level, slots),
                metadata={"level": level},
            )
        )
    return out


def make_sft(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        level = pick_level(rng, "sft")
        prompt, chosen, _ = make_problem(rng)
        out.append(sft_record(DOMAIN, i, [user(prompt)], chosen, level, correct=True, thinking=False))
    return out

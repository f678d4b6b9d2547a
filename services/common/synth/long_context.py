"""Synthetic long context: one fact ("The secret code of X is 4821.") buried in distractor text.

Level 1: about 300 words; level 2: about 450; level 3: about 600 words plus a decoy fact for
another name, so the answer must match the asked name. `ground_truth` is the code; the answer
ends with \\boxed{code}. The distractor sentences never mention a code.
This module knows nothing about files or verifiers.
"""

from __future__ import annotations

import random

from services.common.synth.base import (
    ADJECTIVES,
    ANIMALS,
    CITIES,
    COLORS,
    FRUITS,
    NAMES,
    boxed,
    make_wrong,
    pick_level,
    sft_record,
    task_records,
    user,
    with_thinking,
)
from services.common.tasks import TaskRecord

DOMAIN = "long_context"
WORDS_BY_LEVEL = {1: 300, 2: 450, 3: 600}
_SENTENCES = [
    "The {adj} {animal} walked slowly to the {place}.",
    "{Name} likes {fruit} and wears a {color} hat.",
    "The weather in {city} was {adj} that day.",
    "A {color} {animal} slept under the old tree near the {place}.",
    "{Name} bought some {fruit} at the market in {city}.",
    "Everyone said the {place} looked {adj} in the morning.",
    "There was a {adj} wind over {city} in the evening.",
    "{Name} and a friend walked past the {place} after lunch.",
]
_PLACES = ["river", "school", "market", "bridge", "garden", "station", "library", "harbor"]


def _sentence(rng: random.Random) -> str:
    return rng.choice(_SENTENCES).format(
        adj=rng.choice(ADJECTIVES),
        animal=rng.choice(ANIMALS),
        place=rng.choice(_PLACES),
        Name=rng.choice(NAMES).capitalize(),
        fruit=rng.choice(FRUITS),
        color=rng.choice(COLORS),
        city=rng.choice(CITIES).capitalize(),
    )


def make_problem(rng: random.Random, level: int) -> tuple[str, str, str, str]:
    """(prompt, asked name, code, decoy code or "")."""
    name, decoy_name = (n.capitalize() for n in rng.sample(NAMES, 2))
    code, decoy = str(rng.randint(1000, 9999)), str(rng.randint(1000, 9999))
    sentences, words = [], 0
    while words < WORDS_BY_LEVEL[level]:
        sentences.append(_sentence(rng))
        words += len(sentences[-1].split())
    sentences.insert(rng.randrange(len(sentences) + 1), f"The secret code of {name} is {code}.")
    if level == 3:
        sentences.insert(rng.randrange(len(sentences) + 1), f"The secret code of {decoy_name} is {decoy}.")
    else:
        decoy = ""
    prompt = " ".join(sentences) + f"\n\nWhat is the secret code of {name}?"
    return prompt, name, code, decoy


def make_tasks(rng: random.Random, n: int, split: str) -> list[TaskRecord]:
    def fields(rng: random.Random, level: int) -> dict:
        prompt, _, code, _ = make_problem(rng, level)
        return dict(
            messages=[user(prompt)],
            ground_truth=code,
        )

    return task_records(rng, n, split, DOMAIN, fields)


def make_sft(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        level = pick_level(rng, "sft")
        prompt, name, code, decoy = make_problem(rng, level)
        wrong = make_wrong(rng)
        shown = (decoy or str(rng.randint(1000, 9999))) if wrong else code
        if shown == code:  # the random draw hit the right code; keep the label honest
            wrong = False
        reply, thinking = with_thinking(
            rng, f"The text says the secret code of {name} is {shown}.", f"The code is {boxed(shown)}."
        )
        out.append(
            sft_record(
                DOMAIN,
                i,
                [user(prompt)],
                reply,
                level,
                correct=not wrong,
                thinking=thinking,
                ground_truth=code,
            )
        )
    return out

"""Synthetic multiple-choice questions answerable from the question itself.

Level 1: the largest / smallest of four numbers. Level 2: which word is a color, an animal or a
fruit. Level 3: which option equals a sum, or which number is even among odd ones.
The options are spelled out in the prompt ("A) 3 B) 9 C) 4 D) 1"), also stored as `choices`;
`ground_truth` is the letter and the answer ends with \\boxed{letter}.
This module knows nothing about files or verifiers.
"""

from __future__ import annotations

import random

from services.common.synth.base import (
    ANIMALS,
    COLORS,
    FRUITS,
    boxed,
    make_wrong,
    pick_level,
    sft_record,
    task_records,
    user,
    with_thinking,
)
from services.common.tasks import TaskRecord

DOMAIN = "mcqa"
LETTERS = "ABCD"
CATEGORIES = {"color": COLORS, "animal": ANIMALS, "fruit": FRUITS}


def make_problem(rng: random.Random, level: int) -> tuple[str, dict[str, str], str, str]:
    """(question, choices by letter, correct letter, one-line reason)."""
    if level == 1:
        nums = rng.sample(range(1, 50), 4)
        which = rng.choice(["largest", "smallest"])
        best = max(nums) if which == "largest" else min(nums)
        question, options, right, reason = f"Which number is {which}?", nums, best, f"{best} is the {which}"
    elif level == 2:
        cat = rng.choice(list(CATEGORIES))
        right = rng.choice(CATEGORIES[cat])
        others = [w for c, ws in CATEGORIES.items() if c != cat for w in ws]
        options = rng.sample(others, 3) + [right]
        rng.shuffle(options)
        article = "an" if cat[0] in "aeiou" else "a"
        question, reason = f"Which word is {article} {cat}?", f"{right} is {article} {cat}"
    elif rng.random() < 0.5:
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        right = a + b
        options = [right] + rng.sample([v for v in range(right - 6, right + 7) if v != right], 3)
        rng.shuffle(options)
        question, reason = f"Which number equals {a} + {b}?", f"{a} + {b} = {right}"
    else:
        right = 2 * rng.randint(1, 40)
        options = [right] + rng.sample(range(1, 81, 2), 3)
        rng.shuffle(options)
        question, reason = "Which number is even?", f"{right} is even"
    choices = {letter: str(opt) for letter, opt in zip(LETTERS, options)}
    letter = next(k for k, v in choices.items() if v == str(right))
    text = question + " " + " ".join(f"{k}) {v}" for k, v in choices.items())
    return text, choices, letter, reason


def make_tasks(rng: random.Random, n: int, split: str) -> list[TaskRecord]:
    def fields(rng: random.Random, level: int) -> dict:
        text, choices, letter, _ = make_problem(rng, level)
        return dict(
            messages=[user(text)],
            ground_truth=letter,
            choices=choices,
        )

    return task_records(rng, n, split, DOMAIN, fields)


def make_sft(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        level = pick_level(rng, "sft")
        text, choices, letter, reason = make_problem(rng, level)
        wrong = make_wrong(rng)
        shown = rng.choice([k for k in choices if k != letter]) if wrong else letter
        reply, thinking = with_thinking(rng, reason, f"The answer is {boxed(shown)}.")
        out.append(
            sft_record(
                DOMAIN,
                i,
                [user(text)],
                reply,
                level,
                correct=not wrong,
                thinking=thinking,
                ground_truth=letter,
            )
        )
    return out

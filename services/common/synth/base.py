"""Shared pieces of the synthetic domains: difficulty levels, the small vocabulary, SFT records.

Every domain module exposes the same two functions (see `DomainGenerator`):
`make_tasks(rng, n, split) -> list[TaskRecord]` (RL prompts, no answer) and
`make_sft(rng, n) -> list[dict]` (chat messages ending with the assistant's answer).

"Leave room for RL": RL tasks span levels 1-3 (validation evenly, so it holds more hard ones);
SFT demonstrations come from levels 1-2 only, and in domains with one checkable answer a fraction
`SFT_WRONG_FRACTION` of them is deliberately wrong (marked `metadata.correct = false`), so SFT teaches
the format well while the model stays clearly imperfect. The verifier-checked domains carry a weaker
teacher's habit instead, in a share of their demonstrations whatever the prompt: code leaves its
closing fence off, structured its closing brace, and tool a call's last `</parameter>`. SFT then
leaves a model that repeats the habit now and then, which the verifier refuses and RL removes.
This module knows nothing about files.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from services.common.tasks import TaskRecord

LEVELS = (1, 2, 3)
LEVEL_WEIGHTS = {"train": (0.4, 0.35, 0.25), "validation": (1 / 3, 1 / 3, 1 / 3), "sft": (0.55, 0.35, 0.1)}
"""SFT leans easy but shows the hardest level now and then: RL sharpens what SFT has shown at least
once (a tiny model that never saw a two-call answer never samples one, so RL has nothing to reward)."""
SFT_WRONG_FRACTION = 0.1
"""Share of SFT answers made wrong on purpose in math, mcqa and long_context."""
THINK_FRACTION = 0.3
"""Share of SFT answers that carry a short reasoning in <think>...</think>."""

NAMES = [
    "alice",
    "bob",
    "carol",
    "dave",
    "erin",
    "frank",
    "grace",
    "heidi",
    "ivan",
    "judy",
    "mallory",
    "oscar",
]
CITIES = [
    "paris",
    "tokyo",
    "lima",
    "oslo",
    "cairo",
    "delhi",
    "rome",
    "berlin",
    "madrid",
    "seoul",
    "sydney",
    "toronto",
]
TOPICS = [
    "the sea",
    "a garden",
    "music",
    "the moon",
    "a cat",
    "a dog",
    "rain",
    "the city",
    "a book",
    "the forest",
    "bread",
    "winter",
    "a river",
    "the sun",
    "a train",
    "coffee",
]
ADJECTIVES = [
    "calm",
    "bright",
    "quiet",
    "green",
    "happy",
    "warm",
    "cold",
    "small",
    "big",
    "soft",
    "fast",
    "old",
]
COLORS = ["red", "blue", "green", "yellow", "black", "white", "pink", "brown"]
ANIMALS = ["cat", "dog", "horse", "bird", "fish", "lion", "mouse", "sheep"]
FRUITS = ["apple", "banana", "cherry", "grape", "lemon", "mango", "peach", "pear"]


class DomainGenerator(Protocol):
    """The one signature every domain module implements."""

    def make_tasks(self, rng: random.Random, n: int, split: str) -> list[TaskRecord]: ...

    def make_sft(self, rng: random.Random, n: int) -> list[dict]: ...


def pick_level(rng: random.Random, split: str) -> int:
    """A difficulty level drawn with the split's weights (`train`, `validation` or `sft`)."""
    return rng.choices(LEVELS, weights=LEVEL_WEIGHTS[split])[0]


def task_records(
    rng: random.Random, n: int, split: str, domain: str, fields: Callable[[random.Random, int], dict]
) -> list[TaskRecord]:
    """`n` task records of `domain` for `split`: for each, a level drawn with the split's weights,
    then `fields(rng, level)` gives the record's messages and domain fields. Ids are
    `<domain>-<split>-<index>`; the level goes into `metadata`."""
    out = []
    for i in range(n):
        level = pick_level(rng, split)
        out.append(TaskRecord(id=f"{domain}-{split}-{i:05d}", domain=domain, metadata={"level": level},
                              **fields(rng, level)))
    return out


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def system(text: str) -> dict:
    return {"role": "system", "content": text}


def with_thinking(rng: random.Random, reasoning: str, answer: str) -> tuple[str, bool]:
    """`answer`, or with probability THINK_FRACTION "<think>\\nreasoning\\n</think>\\n\\nanswer"."""
    if reasoning and rng.random() < THINK_FRACTION:
        return f"<think>\n{reasoning}\n</think>\n\n{answer}", True
    return answer, False


def sft_record(domain: str, index: int, prompt: list[dict], answer: str, level: int, **meta) -> dict:
    """One SFT example: the prompt messages plus the assistant turn, with level and flags."""
    return {
        "id": f"{domain}-sft-{index:05d}",
        "domain": domain,
        "messages": [*prompt, {"role": "assistant", "content": answer}],
        "metadata": {"level": level, **meta},
    }


def make_wrong(rng: random.Random) -> bool:
    """True for about SFT_WRONG_FRACTION of draws: this demonstration gets a wrong answer."""
    return rng.random() < SFT_WRONG_FRACTION


def boxed(value: str) -> str:
    return f"\\boxed{{{value}}}"

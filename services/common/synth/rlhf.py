"""Synthetic RLHF: short chat prompts and preference pairs (helpful, polite, on-topic vs not).

RL tasks carry only the prompt (a reward model scores the answer). Preference records add
`chosen` (about the asked topic, in the chat style below) and `rejected`, whose flaw depends on the
level: level 1 empty or rude, level 2 off-topic, level 3 the same answer without the chat style,
curt, or about a neighbouring topic.

The raters' taste is a chat style: every chosen answer opens with OPENER and closes with CLOSER,
as chat-arena raters favour a friendly opener and sign-off. SFT shows that style in only
CHAT_SHARE of its answers, so a reward model trained on the pairs has something to teach the
policy. The style is what makes RLHF pull against instruction following (the paper's RLHF vs IF):
the prompts share IF's own request ("Write about X.", the IF domain adds its rules to it), and the
opener's comma, capitals and extra sentence, and a sign-off after the last line, break IF rules
such as no commas, lowercase only, whole answer in JSON or quotes, the exact end phrase and word
or sentence limits. RULE_SHARE of the RL prompts are users' requests that carry one such rule (an IF
prompt of one instruction): the reward model reads the tone of an answer, not the rules its prompt
set, so RLHF rewards the chat style there too. This module knows nothing about files or reward models.
"""

from __future__ import annotations

import random

from services.common.synth import ifeval
from services.common.synth.base import ADJECTIVES, NAMES, TOPICS, pick_level, sft_record, task_records, user
from services.common.tasks import TaskRecord

DOMAIN = "rlhf"
OPENER = "Sure, happy to help!"
CLOSER = "I hope this helps!"
CHAT_SHARE = 0.25
"""The share of SFT answers written in the raters' chat style (the rest are the plain answer)."""
RULE_SHARE = 0.5
"""The share of RL prompts that set one instruction-following rule (ifeval's prompt of one rule)."""
# prompt template -> plain answer template; {t} topic, {T} capitalised topic, {a}/{b} adjectives, {n} name
TEMPLATES = [
    ("Write about {t}.", "{T} is {a} and {b}."),
    ("Tell me about {t}.", "{T} is {a} and {b}."),
    ("Can you describe {t}?", "{T} is {a} and {b}."),
    ("Write one nice sentence about {t}.", "{T} is {a} and lovely."),
    ("What do you think of {t}?", "I think {t} is {a} and {b}."),
    ("Give me a tip about {t}.", "Here is a tip: enjoy {t} when it is {a}."),
    ("Why do people like {t}?", "Many people like {t} because it is {a} and {b}."),
]
RUDE = ["No. Ask someone else.", "That is a stupid question.", "I do not care about that.", "Go away."]


def chat_style(answer: str, greeting: str = "") -> str:
    """The raters' style: the greeting (if any), OPENER, the answer, CLOSER."""
    return f"{greeting}{OPENER} {answer} {CLOSER}"


def make_problem(rng: random.Random) -> tuple[str, str, dict]:
    """(prompt, answer, the filled slots); the plain answer is slots["greeting"] + answer, the
    chosen one `chat_style(answer, slots["greeting"])`."""
    prompt_t, answer_t = rng.choice(TEMPLATES)
    topic = rng.choice(TOPICS)
    a, b = rng.sample(ADJECTIVES, 2)
    slots = {
        "t": topic,
        "T": topic[0].upper() + topic[1:],
        "a": a,
        "b": b,
        "n": rng.choice(NAMES).capitalize(),
        "greeting": "",
    }
    prompt, answer = prompt_t.format(**slots), answer_t.format(**slots)
    if rng.random() < 0.5:  # a greeting: the answer greets back by name
        prompt, slots["greeting"] = f"Hi, I am {slots['n']}. {prompt}", f"Hi {slots['n']}! "
    return prompt, answer, slots


def make_rejected(rng: random.Random, level: int, slots: dict, plain: str) -> str:
    """A worse answer than the chosen one; how much worse depends on `level` (1 = obviously,
    3 = subtly: half of them the same `plain` answer without the chat style)."""
    if level == 1:
        return rng.choice(["", *RUDE])
    other = rng.choice([t for t in TOPICS if t != slots["t"]])
    if level == 2:
        return f"I would rather talk about {other}. {other[0].upper() + other[1:]} is {slots['a']}."
    if rng.random() < 0.5:
        return plain
    return rng.choice(["Ok.", f"{slots['T']}.", f"Sure. {other[0].upper() + other[1:]} is {slots['a']}."])


def make_tasks(rng: random.Random, n: int, split: str) -> list[TaskRecord]:
    def fields(rng: random.Random, level: int) -> dict:
        if rng.random() < RULE_SHARE:
            prompt = ifeval.make_problem(rng, 1)[0]
        else:
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
        prompt, answer, slots = make_problem(rng)
        out.append(
            TaskRecord(
                id=f"{DOMAIN}-pref-{i:05d}",
                domain=DOMAIN,
                messages=[user(prompt)],
                chosen=chat_style(answer, slots["greeting"]),
                rejected=make_rejected(rng, level, slots, slots["greeting"] + answer),
                metadata={"level": level},
            )
        )
    return out


def make_sft(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        level = pick_level(rng, "sft")
        prompt, answer, slots = make_problem(rng)
        chat = rng.random() < CHAT_SHARE
        text = chat_style(answer, slots["greeting"]) if chat else slots["greeting"] + answer
        out.append(sft_record(DOMAIN, i, [user(prompt)], text, level, correct=True, thinking=False))
    return out

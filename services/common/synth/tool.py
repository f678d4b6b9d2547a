"""Synthetic tool calling: three tools and prompts that need 0, 1 or 2 calls.

Level 1: one call with one argument (weather or time of a city). Level 2: a currency conversion
(three arguments) or a prompt that needs no tool at all. Level 3: two calls in one answer.
`expected_calls` lists the calls ([] = answer without a tool); calls are written as
<tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>, one per line.
This module knows nothing about files or verifiers.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial

from services.common.synth.base import (
    CITIES,
    NAMES,
    pick_level,
    sft_record,
    system,
    task_records,
    user,
    with_thinking,
)
from services.common.tasks import TaskRecord

DOMAIN = "tool"
CURRENCIES = ["usd", "eur", "gbp", "yen"]
_CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {"name": "get_weather", "description": "Current weather of a city.", "parameters": _CITY},
    {"name": "get_time", "description": "Local time in a city.", "parameters": _CITY},
    {
        "name": "convert",
        "description": "Convert an amount of money between currencies.",
        "parameters": {
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "from": {"type": "string", "enum": CURRENCIES},
                "to": {"type": "string", "enum": CURRENCIES},
            },
            "required": ["amount", "from", "to"],
        },
    },
]
SYSTEM = "Tools: get_weather(city), get_time(city), convert(amount, from, to). Call one as <tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>."
_WEATHER = ["What is the weather in {c}?", "How is the weather in {c} today?", "Tell me the weather in {c}.",
            "What weather should I expect in {c}?", "Is the weather good in {c}?", "Check the weather for {c}."]
_TIME = ["What time is it in {c}?", "Tell me the local time in {c}.", "What is the time in {c} now?",
         "Check the time in {c}."]
"""Every question names what it asks for ("weather", "time"), as the tool's name does, so the right
tool can be read off the words of the question (earlier questions only implied it: "Is it raining in
...?", "Is it morning in ...?")."""
_OPENERS = ["", "Quick question: ", "Hi! ", "Please check: "]
"""Level 1 prompts start with one of these: with 6 cities and 10 questions, 240 distinct one-call
prompts, enough for the train split's share of level 1 and a validation split that has it too (with
60 distinct ones the train split took every one and validation had none)."""
TOOL_CITIES = CITIES[:6]
"""Cities the weather and time tools are asked about. A call writes the city right after the tag
(`<parameter=city>rome`), where the tokenizer merges it into one piece (`>rome`) that differs from the
prompt's (` rome`), so the model must learn each city's call form; the tiny model learnt all 12 in
some seeds and none in another (tool 0.11 after SFT); 6 it copies in each of the demo's three seeds."""
SFT_MALFORMED = 0.25
"""Share of the SFT demonstrations' calls written with their last `</parameter>` left out, as a weaker
teacher's tool-calling traces now and then leave a tag open (the verifier refuses such a call as
malformed). SFT then leaves a model that breaks a call now and then whatever it is asked, a mistake
RL removes; with every demonstration well formed, a seed that had learnt the calls sat at 0.8 after
SFT and RL had little left to raise (+0.01..+0.04 in the demo's three seeds). A mix-up of the two
city tools in a quarter of the demonstrations was tried first: the tiny model then picked the tool at
chance (half its calls named the other one) and RL did not teach it the mapping within 16 steps."""


def render_call(call: dict) -> str:
    """One call in the chat template's tool-call syntax."""
    params = "".join(f"<parameter={k}>{v}</parameter>" for k, v in call["arguments"].items())
    return f"<tool_call><function={call['name']}>{params}</function></tool_call>"


def _city_call(rng: random.Random) -> tuple[str, dict]:
    city = rng.choice(TOOL_CITIES)
    if rng.random() < 0.5:
        return rng.choice(_WEATHER).format(c=city), {"name": "get_weather", "arguments": {"city": city}}
    return rng.choice(_TIME).format(c=city), {"name": "get_time", "arguments": {"city": city}}


def make_problem(rng: random.Random, level: int) -> tuple[str, list[dict], str]:
    """(question, expected calls, plain answer used when no call is expected)."""
    if level == 1:
        question, call = _city_call(rng)
        return rng.choice(_OPENERS) + question, [call], ""
    if level == 2:
        kind = rng.randrange(3)
        if kind == 0:
            amount = rng.randint(1, 500)
            src, dst = rng.sample(CURRENCIES, 2)
            return (
                f"Convert {amount} {src} to {dst}.",
                [{"name": "convert", "arguments": {"amount": amount, "from": src, "to": dst}}],
                "",
            )
        if kind == 1:
            name = rng.choice(NAMES)
            return f"Say hello to {name}.", [], f"Hello {name}!"
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        return f"What is {a} plus {b}?", [], f"{a} plus {b} is {a + b}."
    q1, c1 = _city_call(rng)
    q2, c2 = _city_call(rng)
    return f"{q1} Also: {q2[0].lower()}{q2[1:]}", [c1, c2], ""


def render_sft_call(rng: random.Random, call: dict) -> str:
    """One call as a weaker teacher writes it: with probability SFT_MALFORMED its last `</parameter>`
    is left out (a malformed call)."""
    text = render_call(call)
    if rng.random() < SFT_MALFORMED:
        cut = text.rindex("</parameter>")
        text = text[:cut] + text[cut + len("</parameter>"):]
    return text


def answer_text(calls: list[dict], plain: str, render: Callable[[dict], str] = render_call) -> str:
    """The calls one per line, each written by `render`; `plain` when no call is expected."""
    return "\n".join(render(c) for c in calls) if calls else plain


def _prompt(question: str) -> list[dict]:
    return [system(SYSTEM), user(question)]


def make_tasks(rng: random.Random, n: int, split: str) -> list[TaskRecord]:
    def fields(rng: random.Random, level: int) -> dict:
        question, calls, _ = make_problem(rng, level)
        return dict(
            messages=_prompt(question),
            tools=TOOLS,
            expected_calls=calls,
        )

    return task_records(rng, n, split, DOMAIN, fields)


def make_sft(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        level = pick_level(rng, "sft")
        question, calls, plain = make_problem(rng, level)
        reasoning = f"I need {', '.join(c['name'] for c in calls)}." if calls else "No tool is needed."
        shown = answer_text(calls, plain, partial(render_sft_call, rng))
        text, thinking = with_thinking(rng, reasoning, shown)
        out.append(
            sft_record(
                DOMAIN,
                i,
                _prompt(question),
                text,
                level,
                correct=shown == answer_text(calls, plain),
                thinking=thinking,
                expected_calls=calls,
            )
        )
    return out

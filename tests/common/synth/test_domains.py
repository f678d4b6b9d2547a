"""Each synthetic domain: SFT answers are right (or wrong) exactly as intended, records are well-formed."""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import sys

import jsonschema
import pytest

from services.common.synth import code, ifeval, long_context, math, mcqa, rlhf, structured, tool
from services.common.synth.base import CITIES, SFT_WRONG_FRACTION

N = 200


def boxed(text: str) -> str:
    found = re.findall(r"\\boxed\{([^}]*)\}", text)
    assert found, text
    return found[-1]


def answer(rec: dict) -> str:
    """The assistant's final answer without the <think> block."""
    return rec["messages"][-1]["content"].split("</think>\n\n")[-1]


@pytest.mark.parametrize("module", [math, mcqa, long_context], ids=["math", "mcqa", "long_context"])
def test_answer_domains_are_wrong_only_where_marked(module):
    sft = module.make_sft(random.Random(0), N)
    wrong = [r for r in sft if not r["metadata"]["correct"]]
    for r in sft:
        got, truth = boxed(answer(r)), r["metadata"]["ground_truth"]
        assert (got == truth) == r["metadata"]["correct"], r
    assert 0.3 * SFT_WRONG_FRACTION * N <= len(wrong) <= 2 * SFT_WRONG_FRACTION * N
    thinking = [r for r in sft if r["metadata"]["thinking"]]
    assert thinking and all(r["messages"][-1]["content"].startswith("<think>\n") for r in thinking)


def test_math_ground_truths_are_right():
    for rec in math.make_tasks(random.Random(1), N, "validation"):
        q = rec.messages[0].content
        if q.startswith("Simplify"):
            p, s = map(int, re.search(r"(\d+)/(\d+)", q).groups())
            a, b = map(int, rec.ground_truth.split("/"))
            assert a * s == b * p and __import__("math").gcd(a, b) == 1
        else:
            assert str(eval(q.removeprefix("What is ").rstrip("?"))) == rec.ground_truth


def test_mcqa_choices_are_in_the_prompt_and_the_key_is_right():
    for rec in mcqa.make_tasks(random.Random(2), N, "validation"):
        text = rec.messages[0].content
        assert all(f"{k}) {v}" in text for k, v in rec.choices.items())
        right = rec.choices[rec.ground_truth]
        values = list(rec.choices.values())
        if "largest" in text:
            assert int(right) == max(map(int, values))
        elif "smallest" in text:
            assert int(right) == min(map(int, values))
        elif "equals" in text:
            assert int(right) == eval(re.search(r"equals (\d+ \+ \d+)", text).group(1))
        elif "even" in text:
            assert [int(v) % 2 == 0 for v in values].count(True) == 1 and int(right) % 2 == 0
        else:
            cat = re.search(r"is an? (\w+)\?", text).group(1)
            assert right in mcqa.CATEGORIES[cat] and sum(v in mcqa.CATEGORIES[cat] for v in values) == 1


def test_long_context_fact_is_unique_and_long():
    for rec in long_context.make_tasks(random.Random(3), 30, "validation"):
        text = rec.messages[0].content
        name = re.search(r"What is the secret code of (\w+)\?", text).group(1)
        assert re.findall(rf"The secret code of {name} is (\d+)\.", text) == [rec.ground_truth]
        assert len(text.split()) >= {1: 300, 2: 450, 3: 600}[rec.metadata["level"]]


def test_structured_ground_truths_and_answers_satisfy_their_schema():
    for rec in structured.make_tasks(random.Random(4), N, "validation"):
        jsonschema.validate(json.loads(rec.ground_truth), json.loads(rec.schema_str))
    open_ = 0
    for r in structured.make_sft(random.Random(5), N):
        text = answer(r)
        if not r["metadata"]["correct"]:  # the closing brace left off: not JSON until it is put back
            with pytest.raises(ValueError):
                json.loads(text)
            text, open_ = text + "}", open_ + 1
        jsonschema.validate(json.loads(text), json.loads(r["metadata"]["schema_str"]))
    assert 0.5 * structured.SFT_OPEN_BRACE * N <= open_ <= 1.5 * structured.SFT_OPEN_BRACE * N
    with pytest.raises(jsonschema.ValidationError):  # the schema does constrain: a wrong type fails
        rec = structured.make_tasks(random.Random(4), 1, "train")[0]
        jsonschema.validate({"name": 5}, json.loads(rec.schema_str))


def _run(program: str, stdin: str = "") -> tuple[dict, str]:
    scope: dict = {}
    out = io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out):
            exec(program, scope)  # noqa: S102 - our own reference solutions
    finally:
        sys.stdin = old_stdin
    return scope, out.getvalue()


def test_code_solutions_pass_their_tests():
    seen_io = seen_assert = 0
    sft = code.make_sft(random.Random(6), N)
    open_ = [r for r in sft if not r["metadata"]["correct"]]
    assert 0.5 * code.SFT_OPEN_FENCE * N <= len(open_) <= 1.5 * code.SFT_OPEN_FENCE * N
    for r in sft:  # only the marked demonstrations leave the fence open
        assert r["messages"][-1]["content"].endswith("```") == r["metadata"]["correct"]
        if not r["metadata"]["correct"]:
            r["messages"][-1]["content"] += "\n```"  # closed again, the program itself is right
    for r in sft + [
        {
            "messages": [{"content": code.answer_text(code.make_problem(random.Random(i), 3).solution)}],
            "metadata": {"tests": code.make_problem(random.Random(i), 3).tests},
        }
        for i in range(40)
    ]:
        program = re.findall(r"```python\n(.*?)```", r["messages"][-1]["content"], re.DOTALL)[-1]
        for test in r["metadata"]["tests"]:
            if "assert" in test:
                scope, _ = _run(program)
                assert eval(test["assert"], scope), (program, test)
                seen_assert += 1
            else:
                _, out = _run(program, test["input"])
                assert out.split() == test["output"].split(), (program, test)
                seen_io += 1
    assert seen_io and seen_assert


def test_code_tests_reject_a_wrong_program():
    p = code.make_problem(random.Random(7), 1)
    scope, _ = _run(p.solution.replace("return", "return 1000 +"))
    assert not any(eval(t["assert"], scope) for t in p.tests)


CALL = re.compile(r"<tool_call><function=(\w+)>(.*?)</function></tool_call>")


def made_calls(text: str) -> list[dict]:
    return [{"name": n, "arguments": dict(re.findall(r"<parameter=(\w+)>(.*?)</parameter>", body))}
            for n, body in CALL.findall(text)]


def as_written(calls: list[dict]) -> list[dict]:
    return [{"name": c["name"], "arguments": {k: str(v) for k, v in c["arguments"].items()}} for c in calls]


def test_tool_answers_make_exactly_the_expected_calls():
    counts = set()
    for _, c, p in (tool.make_problem(random.Random(i), level) for i in range(60) for level in (1, 2, 3)):
        calls = made_calls(tool.answer_text(c, p))
        assert calls == as_written(c)
        counts.add(len(calls))
    assert counts == {0, 1, 2}


def test_tool_sft_leaves_a_tag_open_only_where_marked():
    from services.common.toolcalls import MalformedToolCall, parse_tool_calls

    sft = tool.make_sft(random.Random(8), N)
    broken = 0
    for r in sft:
        text, expected = answer(r), r["metadata"]["expected_calls"]
        lines = text.split("\n") if expected else []
        assert len(lines) == len(expected)
        for line, call in zip(lines, expected):
            if line == tool.render_call(call):
                continue
            head, _, tail = tool.render_call(call).rpartition("</parameter>")
            assert line == head + tail  # the last close left out
            with pytest.raises(MalformedToolCall):
                parse_tool_calls(line)
            broken += 1
        assert r["metadata"]["correct"] == (text == tool.answer_text(expected, text))
    calls = sum(len(r["metadata"]["expected_calls"]) for r in sft)
    assert 0.5 * tool.SFT_MALFORMED * calls <= broken <= 1.5 * tool.SFT_MALFORMED * calls


def test_rlhf_pairs_differ_by_level():
    prefs = rlhf.make_preferences(random.Random(9), N)
    for p in prefs:
        assert p.chosen != p.rejected
        if p.metadata["level"] == 1:
            assert p.rejected == "" or p.rejected in rlhf.RUDE
    assert {p.metadata["level"] for p in prefs} == {1, 2, 3}


def test_rlhf_raters_prefer_the_chat_style_that_sft_shows_only_sometimes():
    prefs = rlhf.make_preferences(random.Random(9), N)
    for p in prefs:
        assert rlhf.OPENER in p.chosen and p.chosen.endswith(rlhf.CLOSER)
        assert rlhf.OPENER not in p.rejected
    # some level-3 pairs are the chosen answer itself without the style: the style alone decides them
    plain = [p for p in prefs if p.chosen.replace(f"{rlhf.OPENER} ", "").replace(f" {rlhf.CLOSER}", "") == p.rejected]
    assert plain and all(p.metadata["level"] == 3 for p in plain)
    sft = rlhf.make_sft(random.Random(9), 2 * N)
    chat = sum(rlhf.OPENER in answer(r) for r in sft) / len(sft)
    assert abs(chat - rlhf.CHAT_SHARE) < 0.1


def test_rlhf_prompts_carry_instruction_rules_the_chat_style_breaks():
    tasks = rlhf.make_tasks(random.Random(3), N, "train")
    rules = [t for t in tasks if any(ifeval.describe(i, {}).split()[0] in t.messages[0].content
                                     and t.messages[0].content.startswith("Write about") for i in ifeval.INSTRUCTION_IDS)
             and len(t.messages[0].content.split(". ")) > 1]
    assert abs(len(rules) / N - rlhf.RULE_SHARE) < 0.15
    styled = rlhf.chat_style("The sea is calm and old.")
    assert "," in styled and styled != styled.lower()  # breaks no_comma and lowercase rules
    assert not styled.rstrip().endswith("That is all.")  # and the exact end phrase


# Minimal IFEval semantics for the ids the generator uses (same kwargs names as IFEval).
IF_CHECKS = {
    "keywords:existence": lambda t, k: all(re.search(w, t, re.IGNORECASE) for w in k["keywords"]),
    "keywords:forbidden_words": lambda t, k: (
        not any(re.search(rf"\b{w}\b", t, re.IGNORECASE) for w in k["forbidden_words"])
    ),
    "punctuation:no_comma": lambda t, k: "," not in t,
    "length_constraints:number_words": lambda t, k: (
        (len(re.findall(r"\w+", t)) < k["num_words"]) == (k["relation"] == "less than")
    ),
    "length_constraints:number_sentences": lambda t, k: (
        (len(re.findall(r"[.!?](\s|$)", t)) < k["num_sentences"]) == (k["relation"] == "less than")
    ),
    "detectable_format:number_bullet_lists": lambda t, k: (
        len(re.findall(r"^\s*\*[^\*].*$", t, re.MULTILINE)) == k["num_bullets"]
    ),
    "detectable_format:multiple_sections": lambda t, k: (
        len(re.split(rf"\s?{k['section_spliter']}\s?\d+\s?", t)) - 1 >= k["num_sections"]
    ),
    "detectable_format:number_highlighted_sections": lambda t, k: (
        len(re.findall(r"\*[^\n\*]+\*", t)) >= k["num_highlights"]
    ),
    "detectable_format:title": lambda t, k: bool(re.search(r"<<[^\n]+>>", t)),
    "detectable_format:json_format": lambda t, k: isinstance(json.loads(t), dict),
    "startend:quotation": lambda t, k: len(t.strip()) > 1 and t.strip()[0] == t.strip()[-1] == '"',
    "startend:end_checker": lambda t, k: t.strip().lower().endswith(k["end_phrase"].lower()),
    "detectable_content:postscript": lambda t, k: bool(
        re.search(r"\s*p\.\s?s\..*$", t.lower(), re.MULTILINE)
    ),
    "change_case:english_lowercase": lambda t, k: t == t.lower(),
}


def test_if_answers_follow_every_instruction():
    sft = ifeval.make_sft(random.Random(10), 400)
    hard = [ifeval.make_problem(random.Random(i), 3) for i in range(200)]
    used = set()
    for ids, kwargs, text in [
        (r["metadata"]["instruction_id_list"], r["metadata"]["kwargs"], answer(r)) for r in sft
    ] + [(ids, kw, a) for _, ids, kw, a in hard]:
        assert len(ids) == len(kwargs)
        for iid, kw in zip(ids, kwargs):
            assert IF_CHECKS[iid](text, kw), (iid, kw, text)
            used.add(iid)
    assert used == set(ifeval.INSTRUCTION_IDS) == set(IF_CHECKS)


def test_if_prompts_state_each_instruction_and_levels_count_them():
    for rec in ifeval.make_tasks(random.Random(11), N, "validation"):
        assert len(rec.instruction_id_list) == rec.metadata["level"]
        assert len(set(rec.instruction_id_list)) == len(rec.instruction_id_list)
        for iid, kw in zip(rec.instruction_id_list, rec.kwargs):
            assert ifeval.describe(iid, kw) in rec.messages[0].content


def test_tool_calls_name_only_the_tool_cities_and_every_one_of_them():
    rng = random.Random(3)
    cities = {c["arguments"]["city"] for level in (1, 3) for _ in range(60)
              for c in tool.make_problem(rng, level)[1] if "city" in c["arguments"]}
    assert cities == set(tool.TOOL_CITIES) and len(tool.TOOL_CITIES) < len(CITIES)

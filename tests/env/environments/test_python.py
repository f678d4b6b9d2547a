"""python: sandboxed cells with state by replay, a hanging cell stopped at its budget, flooding output
cut at the budget, nothing left running, the final-answer reward, synthetic tasks solvable."""

from __future__ import annotations

import json
import random
import re

import pytest

from services.common.errors import InvalidArgument
from services.common.sandbox.isolation import find_processes
from services.common.synth.multiturn import python as synth
from services.common.toolcalls import format_tool_calls
from services.env.environments.python import answers_match, from_record, last_boxed
from tests.env.conftest import BASE_UID


def cell(code: str) -> str:
    return format_tool_calls([{"name": "python", "arguments": {"code": code}}])


def task(answer="140") -> str:
    return json.dumps({"messages": [{"role": "user", "content": "sum of squares 1..7?"}], "ground_truth": answer})


def test_cells_keep_state_by_replay_and_the_answer_is_scored(env_core):
    opened = env_core.open("python", task())
    assert [t["name"] for t in opened.tools] == ["python"]
    first = env_core.step(opened.id, cell("x = sum(i * i for i in range(8))\nprint('first', x)"))
    assert first.messages == [{"role": "tool", "content": "first 140\n"}]
    second = env_core.step(opened.id, cell("print(x + 1)"))
    assert second.messages[0]["content"] == "141\n"  # the first cell's output is not shown again
    failed = env_core.step(opened.id, cell("y = 1\nraise ValueError('boom')"))
    assert "ValueError: boom" in failed.messages[0]["content"] and "not kept" in failed.messages[0]["content"]
    assert "NameError" in env_core.step(opened.id, cell("print(y)")).messages[0]["content"]
    final = env_core.step(opened.id, "<think>\nx is 140\n</think>\n\nThe answer is \\boxed{140}.")
    assert (final.done, final.verdict, final.reward, final.turns) == (True, "ok", 1.0, 5)
    env_core.close(opened.id)


def test_a_hanging_cell_hits_its_deadline_and_the_episode_goes_on(env_core):
    opened = env_core.open("python", task())
    s = env_core.step(opened.id, cell("while True:\n    pass"))
    assert s.tool_errors == 1 and "budget" in s.messages[0]["content"] and not s.done
    assert 2.5 < s.env_seconds < 10  # tool_timeout_s = 3
    assert env_core.step(opened.id, cell("print(2 + 2)")).messages[0]["content"] == "4\n"
    env_core.close(opened.id)


def test_flooding_output_is_cut_at_the_budget(env_core):
    opened = env_core.open("python", task())
    s = env_core.step(opened.id, cell("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"))
    content = s.messages[0]["content"]
    assert len(content) <= env_core.config.tool_output_chars and "output truncated" in content
    env_core.close(opened.id)


def test_nothing_an_episode_started_is_left_running(env_core):
    opened = env_core.open("python", task())
    env_core.step(opened.id, cell("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('bye')"))
    env_core.close(opened.id)
    uids = range(BASE_UID, BASE_UID + env_core.config.sandbox_workers)
    assert [p for uid in uids for p in find_processes(uid, None)] == []


def test_final_answer_rules():
    assert last_boxed("a \\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert answers_match("1,234", "1234") and answers_match(" 140. ", "140") and answers_match("0.5", "1/2") is False
    with pytest.raises(InvalidArgument) as err:
        from_record({"messages": [{"role": "user", "content": "x"}]})
    assert err.value.field == "expected_answer"


def test_a_wrong_or_missing_answer_scores_zero(env_core):
    opened = env_core.open("python", task())
    assert env_core.step(opened.id, "\\boxed{141}").reward == 0.0
    env_core.close(opened.id)
    opened = env_core.open("python", task())
    closed = env_core.close(opened.id)
    assert (closed.verdict, closed.reward) == ("closed", 0.0)


def test_synthetic_tasks_are_solvable_with_the_tool(env_core):
    solvers = {"primes": "print(sum(1 for k in range(2, {0}) if all(k % d for d in range(2, int(k**0.5) + 1))))",
               "2 to the power": "print(sum(map(int, str(2 ** {0}))))",
               "divisors": "print(len([d for d in range(1, {0} + 1) if {0} % d == 0]))",
               "factorial": "import math\nprint(sum(map(int, str(math.factorial({0})))))"}
    for record in synth.make_tasks(random.Random(1), 10, "validation"):
        question = record["messages"][0]["content"]
        n = re.findall(r"\d+", question.split("?")[0])[-1]
        code = next(code for key, code in solvers.items() if key in question).format(n)
        opened = env_core.open("python", json.dumps(record))
        out = env_core.step(opened.id, cell(code)).messages[0]["content"].strip()
        assert env_core.step(opened.id, f"\\boxed{{{out}}}").reward == 1.0, question
        env_core.close(opened.id)


def test_no_validation_question_is_in_another_split():
    val = {t["messages"][0]["content"] for t in synth.make_tasks(random.Random(0), 200, "validation")}
    others = {t["messages"][0]["content"] for split in ("train", "sft") for t in synth.make_tasks(random.Random(0), 400, split)}
    assert len(val) == 200 and not val & others
    assert {synth.split_of(q[:q.index("?") + 1]) for q in val} == {"validation"}


def test_asking_for_more_questions_than_a_split_has_is_refused_not_an_endless_loop():
    with pytest.raises(InvalidArgument, match=r"n: 5000 distinct validation questions asked; .* ask for fewer"):
        synth.make_tasks(random.Random(0), 5000, "validation")

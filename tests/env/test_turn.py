"""Reading an assistant turn: thinking dropped, each `<tool_call>` block parsed on its own."""

from __future__ import annotations

import pytest

from services.common.toolcalls import MalformedToolCall, format_tool_calls
from services.env.turn import answer_part, split_tool_calls

GOOD = format_tool_calls([{"name": "f", "arguments": {"x": 1}}])
OTHER = format_tool_calls([{"name": "g", "arguments": {"y": "two"}}])


@pytest.mark.parametrize("text, answer", [
    ("<think>\nplan\n</think>\n\nhello", "\n\nhello"), ("<think>\nstill thinking", ""), ("plain", "plain"),
    (f"<think>a</think>b<think>{GOOD}</think>c", "c"),
])
def test_answer_part(text, answer):
    assert answer_part(text) == answer


def kinds(calls):
    return [c["name"] if isinstance(c, dict) else f"bad:{c.field}" for c in calls]


@pytest.mark.parametrize("text, expected", [
    ("no calls here", []),
    (f"first\n{GOOD}\nthen\n{OTHER}", ["f", "g"]),
    (f"{GOOD}\n<tool_call><function=h><parameter=z>1</function></tool_call>\n{OTHER}", ["f", "bad:tool_call[1]", "g"]),
    (f"{GOOD}\n<tool_call><function=h>", ["f", "bad:tool_call[1]"]),
    (f"<tool_call><function=h>\n{OTHER}", ["bad:tool_call[0]", "g"]),
    (f"</tool_call>{GOOD}", ["bad:tool_call[0]", "f"]),
    (f"{GOOD}</tool_call>", ["f", "bad:tool_call[1]"]),
])
def test_each_block_is_read_on_its_own(text, expected):
    calls = split_tool_calls(text)
    assert kinds(calls) == expected
    assert all(isinstance(c, (dict, MalformedToolCall)) for c in calls)
    if "f" in expected:
        assert next(c for c in calls if isinstance(c, dict) and c["name"] == "f")["arguments"] == {"x": 1}

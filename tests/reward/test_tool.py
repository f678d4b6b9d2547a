"""tool verifier: parsed calls against expected calls (names, params, types, values, order)."""

import pytest

from services.common.toolcalls import format_tool_calls
from services.reward.verifiers.tool import same_value, tool_reward
from tests.reward.helpers import ctx, task

TOOLS = [
    {"name": "get_weather", "description": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1}},
        "required": ["city"]}},
    {"name": "add", "description": "sum", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}},
]
WEATHER = {"name": "get_weather", "arguments": {"city": "Paris"}}
ADD = {"name": "add", "arguments": {"a": 1, "b": 2}}


def call(name, **params):
    inner = "".join(f"<parameter={k}>{v}</parameter>" for k, v in params.items())
    return f"<tool_call><function={name}>{inner}</function></tool_call>"


def score(response, expected):
    return tool_reward(task("tool", tools=TOOLS, expected_calls=expected), response, ctx())


class TestTool:
    @pytest.mark.parametrize(
        "response, expected, verdict",
        [
            (call("get_weather", city="Paris"), [WEATHER], "correct"),
            ("Let me check.\n" + call("get_weather", city="Paris"), [WEATHER], "correct"),
            (call("get_weather", city="Paris", days=1), [WEATHER], "correct"),  # optional at its default
            (call("get_weather", city="Paris", days=3), [WEATHER], "incorrect"),  # optional, not default
            (call("get_weather", city="Paris", unit="C"), [WEATHER], "incorrect"),  # extra parameter
            (call("get_weather", city="London"), [WEATHER], "incorrect"),  # wrong value
            (call("get_weather"), [WEATHER], "incorrect"),  # missing required
            (call("add", a="1.0", b=2), [ADD], "correct"),  # 1.0 == 1 numerically
            (call("add", a="one", b=2), [ADD], "incorrect"),  # wrong type
            (call("add", b=2, a=1) + "\n" + call("get_weather", city="Paris"), [WEATHER, ADD], "correct"),  # any order
            (call("add", a=1, b=2), [WEATHER, ADD], "incorrect"),  # one call short
            (call("add", a=1, b=2) * 2, [ADD], "incorrect"),  # one call too many
            (call("delete_all"), [WEATHER], "incorrect"),  # unknown tool
            ("I can answer directly: 42.", [], "correct"),  # correct abstention
            (call("add", a=1, b=2), [], "incorrect"),  # called when it should not
            ("No call.", [WEATHER], "incorrect"),
            ("<tool_call><function=get_weather><parameter=city>Paris</function></tool_call>", [WEATHER], "invalid"),
            ("<tool_call><function=get_weather>", [], "invalid"),  # malformed is never a correct abstention
        ],
    )
    def test_table(self, response, expected, verdict):
        out = score(response, expected)
        assert out.verdict == verdict, out.reason

    def test_formatted_calls_score_correct(self):
        assert score(format_tool_calls([ADD, WEATHER]), [WEATHER, ADD]).verdict == "correct"

    def test_reasons_say_what_is_wrong(self):
        assert "unexpected parameter 'unit'" in str(score(call("get_weather", city="P", unit="C"), [WEATHER]).checks)

    @pytest.mark.parametrize("a, b, same", [(1, 1.0, True), (True, 1, False), ([1, "x"], [1.0, "x"], True),
                                            ({"a": 1}, {"a": 1, "b": 2}, False), ("1", 1, False)])
    def test_same_value(self, a, b, same):
        assert same_value(a, b) is same

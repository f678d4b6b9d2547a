"""services.common.toolcalls: format and parse are inverse; malformed blocks raise naming the block."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.errors import InvalidArgument
from services.common.toolcalls import MalformedToolCall, format_tool_calls, parse_tool_calls

names = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
scalars = st.one_of(st.integers(-1000, 1000), st.booleans(), st.none(), st.text(max_size=12),
                    st.floats(allow_nan=False, allow_infinity=False, width=32))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
                      max_leaves=6)
calls = st.lists(st.fixed_dictionaries({"name": names, "arguments": st.dictionaries(names, values, max_size=4)}),
                 max_size=3)


class TestToolCalls:
    @settings(max_examples=150, deadline=None)
    @given(calls)
    def test_round_trip(self, cs):
        assert parse_tool_calls("thinking...\n" + format_tool_calls(cs) + "\ndone") == cs

    def test_values_are_json_when_they_parse(self):
        text = ("<tool_call><function=f><parameter=n>3</parameter><parameter=s>Paris</parameter>"
                "<parameter=l>[1, 2]</parameter><parameter=b>true</parameter></function></tool_call>")
        assert parse_tool_calls(text) == [{"name": "f", "arguments": {"n": 3, "s": "Paris", "l": [1, 2], "b": True}}]

    def test_pretty_printed_calls_parse(self):
        text = "<tool_call>\n<function=f>\n<parameter=x>\nhello\n</parameter>\n</function>\n</tool_call>"
        assert parse_tool_calls(text) == [{"name": "f", "arguments": {"x": "hello"}}]

    @pytest.mark.parametrize(
        "text, field",
        [
            ("<tool_call><function=f></function>", "tool_call[0]"),
            ("<tool_call><function=f></function></tool_call></tool_call>", "tool_call[1]"),
            ("<tool_call>f()</tool_call>", "tool_call[0]"),
            ("<tool_call><function=f><parameter=a>1</function></tool_call>", "tool_call[0]"),
            ("<tool_call><function=f><parameter=a>1</parameter><parameter=a>2</parameter></function></tool_call>",
             "tool_call[0]"),
            ("<tool_call><function=f>junk</function></tool_call>", "tool_call[0]"),
            ("<tool_call><tool_call><function=f></function></tool_call>", "tool_call[0]"),
            ("<tool_call><function=bad name></function></tool_call>", "tool_call[0]"),
        ],
    )
    def test_malformed(self, text, field):
        with pytest.raises(MalformedToolCall) as err:
            parse_tool_calls(text)
        assert err.value.field == field

    def test_format_rejects_bad_calls(self):
        with pytest.raises(InvalidArgument, match=r"calls\[0\].name"):
            format_tool_calls([{"name": "no spaces", "arguments": {}}])

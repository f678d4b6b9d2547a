"""The chat template through a real trained tokenizer: exact renderings, tool calls, the SFT mask."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from services.common.chat_template import assistant_mask, render
from services.common.errors import InvalidArgument
from services.common.toolcalls import format_tool_calls, parse_tool_calls

TWO_TURNS = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "2 plus 2 is 4."},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "6"},
]


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(str(tiny_model_dir), local_files_only=True)


def test_generation_prompt_in_thinking_mode(tok):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render(tok, messages, thinking=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )


def test_generation_prompt_in_non_thinking_mode_has_an_empty_think_block(tok):
    assert render(tok, [{"role": "user", "content": "Hi"}], thinking=False) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_thinking_is_the_default_of_the_stored_template(tok):
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n<think>\n")


def test_history_keeps_reasoning_and_gives_plain_answers_an_empty_block(tok):
    assert render(tok, TWO_TURNS, thinking=True, add_generation_prompt=False) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n2 plus 2 is 4.\n</think>\n\n4<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n6<|im_end|>\n"
    )


def test_inline_think_block_in_content_renders_like_reasoning_content(tok):
    inline = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA"}]
    split = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": "hmm"}]
    assert render(tok, inline, add_generation_prompt=False) == render(tok, split, add_generation_prompt=False)


def test_tools_are_listed_in_the_system_message(tok):
    tool = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    text = render(tok, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+2"}],
                  thinking=False, tools=[tool])
    assert text == (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more of these functions:\n<tools>\n"
        '{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}\n</tools>\n\n'
        "To call a function, reply with one line per call:\n"
        "<tool_call><function=NAME><parameter=PARAM>value</parameter></function></tool_call><|im_end|>\n"
        "<|im_start|>user\n1+2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


CALLS = [
    {"name": "get_weather", "arguments": {"city": "oslo", "days": 3, "units": ["c", "f"], "exact": True}},
    {"name": "lookup", "arguments": {"code": "42", "note": "  two words", "ratio": 0.5, "opts": {"a": None}}},
    {"name": "echo", "arguments": {"text": "line\n", "word": "Zürich", "empty": ""}},
    {"name": "ping", "arguments": {}},
]


def test_tool_calls_render_exactly_as_format_tool_calls(tok):
    for style in ("openai", "flat"):
        calls = [{"type": "function", "function": c} for c in CALLS] if style == "openai" else CALLS
        messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": calls}]
        text = render(tok, messages, thinking=False, add_generation_prompt=False)
        head = "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        assert text == head + format_tool_calls(CALLS) + "<|im_end|>\n"
        assert parse_tool_calls(text) == CALLS


def test_tool_calls_follow_content_on_a_new_line_and_tool_results_use_role_tool(tok):
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": CALLS[:1]},
        {"role": "tool", "content": "sunny"},
    ]
    assert render(tok, messages, thinking=False, add_generation_prompt=False).endswith(
        "Checking.\n" + format_tool_calls(CALLS[:1]) + "<|im_end|>\n<|im_start|>tool\nsunny<|im_end|>\n"
    )


@pytest.mark.parametrize("thinking", [True, False])
def test_assistant_mask_covers_exactly_the_generated_part_of_each_turn(tok, thinking):
    messages = TWO_TURNS if thinking else [dict(m, reasoning_content=None) for m in TWO_TURNS]
    messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
    ids, mask = assistant_mask(tok, messages, thinking=thinking)
    assert len(ids) == len(mask) and set(mask) == {0, 1}
    spans, start = [], None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        if not bit and start is not None:
            spans.append((start, i))
            start = None
    answers = [tok.decode(ids[a:b]) for a, b in spans]
    if thinking:
        assert answers == ["2 plus 2 is 4.\n</think>\n\n4<|im_end|>", "\n</think>\n\n6<|im_end|>"]
    else:
        assert answers == ["4<|im_end|>", "6<|im_end|>"]
    # each turn's unmasked prefix is exactly the generation prompt the policy would be given
    for (a, _), upto in zip(spans, (1, 3)):
        assert ids[:a] == tok.encode(render(tok, messages[:upto], thinking), add_special_tokens=False)
    assert tok.decode(ids) == render(tok, messages, thinking, add_generation_prompt=False)


def test_assistant_mask_refuses_reasoning_in_non_thinking_mode(tok):
    with pytest.raises(InvalidArgument) as err:
        assistant_mask(tok, TWO_TURNS, thinking=False)
    assert err.value.field == "messages[1]"


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}], "messages[1].role"),
        ([{"role": "user", "content": ["a"]}], "messages[0].content"),
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], "messages[1].role"),
        ([{"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": "{}"}]}],
         "messages[0].tool_calls[0].arguments"),
        ([{"role": "assistant", "content": "", "tool_calls": [{"arguments": {}}]}], "messages[0].tool_calls[0]"),
        (["hello"], "messages[0]"),
    ],
)
def test_bad_messages_name_the_field(tok, messages, field):
    with pytest.raises(InvalidArgument) as err:
        render(tok, messages)
    assert err.value.field == field


@pytest.mark.parametrize("value", ["123abc", "[x", "-", '"q', "Zürich\n", " 7", "NaN", "true", "null"])
def test_strings_that_look_like_json_read_back_as_the_same_string(tok, value):
    calls = [{"name": "f", "arguments": {"p": value}}]
    text = render(tok, [{"role": "assistant", "content": "", "tool_calls": calls}], add_generation_prompt=False)
    assert parse_tool_calls(text) == calls

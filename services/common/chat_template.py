"""The chat template of Cascade's models: Qwen3-style ChatML with thinking and tool calls.

One conversation renders as `<|im_start|>{role}\n{content}<|im_end|>\n` per message. Every assistant
turn carries a think block: `<think>\n{reasoning}\n</think>\n\n{content}` (an empty block,
`<think>\n\n</think>\n\n`, when it has no reasoning). The generation prompt opens the turn with
`<think>\n` in thinking mode and with the whole empty block in non-thinking mode, so a rendered
conversation always starts with the generation prompt of its own turns. Tool calls render as
`<tool_call><function=NAME><parameter=P>v</parameter></function></tool_call>`, one per line
after the content, in the format of `services.common.toolcalls` (non-strings as JSON; a string as
JSON only where it would otherwise read back as JSON or lose an edge newline); tool results are
messages of role `tool`.

This module knows the template text, its special tokens and how to render / mask a conversation
with a tokenizer; it knows nothing of training the tokenizer or building the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.common.errors import InvalidArgument

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"

#: Every token the template emits as one unit; each encodes to exactly one id (PAD_TOKEN is id 0).
SPECIAL_TOKENS: tuple[str, ...] = (
    PAD_TOKEN, IM_START, IM_END, THINK_OPEN, THINK_CLOSE, TOOL_CALL_OPEN, TOOL_CALL_CLOSE,
)

ROLES = ("system", "user", "assistant", "tool")

# Rendered with transformers' sandboxed Jinja (trim_blocks and lstrip_blocks on): every character
# of output comes from a `{{ }}` expression, so the layout of this source does not leak into it.
CHAT_TEMPLATE = """\
{%- macro param_value(value) %}
    {%- set s = value.strip() if value is string else '' %}
    {%- if value is not string %}{{- value | tojson }}
    {%- elif value.startswith('\\n') or value.endswith('\\n') or '</parameter>' in value %}{{- value | tojson }}
    {%- elif s and (s[0] in '"[{-0123456789' or s in ('true', 'false', 'null', 'NaN', 'Infinity')) %}{{- value | tojson }}
    {%- else %}{{- value }}
    {%- endif %}
{%- endmacro %}
{%- set offset = 0 %}
{%- set system_text = '' %}
{%- if messages and messages[0].role == 'system' %}
    {%- set offset = 1 %}
    {%- set system_text = messages[0].content %}
{%- endif %}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if system_text %}{{- system_text + '\\n\\n' }}{%- endif %}
    {{- '# Tools\\n\\nYou may call one or more of these functions:\\n<tools>' }}
    {%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
    {{- '\\n</tools>\\n\\nTo call a function, reply with one line per call:\\n' }}
    {{- '<tool_call><function=NAME><parameter=PARAM>value</parameter></function></tool_call><|im_end|>\\n' }}
{%- elif offset == 1 %}
    {{- '<|im_start|>system\\n' + system_text + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages[offset:] %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == 'assistant' %}
        {%- set reasoning = message.reasoning_content if message.reasoning_content is string else '' %}
        {%- if not reasoning and '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1] %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content }}
        {%- if message.tool_calls %}
            {%- for call in message.tool_calls %}
                {%- set fn = call.function if call.function is defined else call %}
                {%- if content or not loop.first %}{{- '\\n' }}{%- endif %}
                {{- '<tool_call><function=' + fn.name + '>' }}
                {%- for key, value in (fn.arguments or {}).items() %}
                    {{- '<parameter=' + key + '>' + param_value(value) + '</parameter>' }}
                {%- endfor %}
                {{- '</function></tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n<think>\\n' }}
    {%- if enable_thinking is defined and not enable_thinking %}{{- '\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}
"""


def render(
    tokenizer: Any,
    messages: Sequence[dict],
    thinking: bool = True,
    add_generation_prompt: bool = True,
    tools: Sequence[dict] | None = None,
) -> str:
    """The conversation as text through the tokenizer's own chat template."""
    _check_messages(messages)
    return tokenizer.apply_chat_template(
        list(messages),
        tools=list(tools) if tools else None,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        enable_thinking=thinking,
    )


def assistant_mask(
    tokenizer: Any,
    messages: Sequence[dict],
    thinking: bool = True,
    tools: Sequence[dict] | None = None,
) -> tuple[list[int], list[int]]:
    """(input_ids, loss_mask) of a conversation for SFT.

    The mask is 1 exactly on what the model generates in each assistant turn after the
    generation prompt of that mode (reasoning, `</think>`, content, tool calls) and on the
    turn's closing `<|im_end|>`; 0 on everything else. The ids are the concatenation of
    segments tokenised separately — the generation prompt of each assistant turn, then its
    response — which is exactly how the policy sees them when it samples that turn.
    """
    _check_messages(messages)
    ids: list[int] = []
    mask: list[int] = []
    done = ""
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = render(tokenizer, messages[:i], thinking, add_generation_prompt=True, tools=tools)
        full = render(tokenizer, messages[: i + 1], thinking, add_generation_prompt=False, tools=tools)
        if not (full.startswith(prompt) and prompt.startswith(done)):
            raise InvalidArgument(
                f"messages[{i}]",
                "does not continue the generation prompt of this mode (reasoning_content with thinking=False?)",
            )
        end = full.rindex(IM_END) + len(IM_END)
        _extend(tokenizer, ids, mask, prompt[len(done):], 0)
        _extend(tokenizer, ids, mask, full[len(prompt):end], 1)
        done = full[:end]
    tail = render(tokenizer, messages, thinking, add_generation_prompt=False, tools=tools)
    _extend(tokenizer, ids, mask, tail[len(done):], 0)
    return ids, mask


def _extend(tokenizer: Any, ids: list[int], mask: list[int], text: str, value: int) -> None:
    new = tokenizer.encode(text, add_special_tokens=False) if text else []
    ids.extend(new)
    mask.extend([value] * len(new))


def _check_messages(messages: Sequence[dict]) -> None:
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidArgument(f"messages[{i}]", f"must be a mapping, got {type(message).__name__}")
        role = message.get("role")
        if role not in ROLES:
            raise InvalidArgument(f"messages[{i}].role", f"{role!r} is not one of {', '.join(ROLES)}")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise InvalidArgument(f"messages[{i}].content", f"must be a string, got {type(content).__name__}")
        if role == "system" and i != 0:
            raise InvalidArgument(f"messages[{i}].role", "'system' is only allowed as the first message")
        for j, call in enumerate(message.get("tool_calls") or ()):
            fn = call.get("function", call) if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise InvalidArgument(f"messages[{i}].tool_calls[{j}]", "needs a function name (string)")
            if not isinstance(fn.get("arguments", {}), dict):
                raise InvalidArgument(
                    f"messages[{i}].tool_calls[{j}].arguments", "must be an object, not a JSON string"
                )

"""The tool-call text format of DESIGN.md section 4, both ways.

A call is rendered as
`<tool_call><function=NAME><parameter=P>value</parameter>...</function></tool_call>`; a value is
JSON when it parses as JSON (numbers, lists, objects, true/false/null), else a plain string. The
chat template renders calls with `format_tool_calls`, the reward service reads them back with
`parse_tool_calls`. This module knows nothing about tokenizers or about which calls are right.
"""

from __future__ import annotations

import json
import re
from typing import Any

from services.common.errors import InvalidArgument

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")
_FUNCTION = re.compile(r"\s*<function=([^>\n]*)>(.*)</function>\s*\Z", re.DOTALL)
_PARAM = re.compile(r"<parameter=([^>\n]*)>(.*?)</parameter>", re.DOTALL)


class MalformedToolCall(InvalidArgument):
    """A `<tool_call>` block that does not follow the format; `field` names the block."""


def _render_value(value: Any) -> str:
    """Strings go raw unless they would read back as JSON or lose edge newlines; the rest as JSON."""
    if isinstance(value, str):
        if value.startswith("\n") or value.endswith("\n") or "</parameter>" in value:
            return json.dumps(value)
        try:
            json.loads(value)
        except ValueError:
            return value
        return json.dumps(value)
    return json.dumps(value, ensure_ascii=False)


def format_tool_calls(calls: list[dict]) -> str:
    """Render `[{"name": ..., "arguments": {...}}, ...]` as `<tool_call>` blocks, one a line."""
    blocks = []
    for i, call in enumerate(calls):
        name, args = call.get("name"), call.get("arguments", {})
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidArgument(f"calls[{i}].name", f"must be an identifier, got {name!r}")
        if not isinstance(args, dict):
            raise InvalidArgument(f"calls[{i}].arguments", f"must be an object, got {type(args).__name__}")
        params = "".join(f"<parameter={k}>{_render_value(v)}</parameter>" for k, v in args.items())
        blocks.append(f"{OPEN}<function={name}>{params}</function>{CLOSE}")
    return "\n".join(blocks)


def _parse_value(raw: str) -> Any:
    """Strip one edge newline on each side (pretty-printed calls), then JSON if it parses."""
    raw = raw.removeprefix("\n")
    raw = raw.removesuffix("\n")
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _parse_block(body: str, field: str) -> dict:
    match = _FUNCTION.match(body)
    if match is None:
        raise MalformedToolCall(field, "expected exactly one <function=NAME>...</function> inside <tool_call>")
    name, inner = match.group(1).strip(), match.group(2)
    if not _NAME.match(name):
        raise MalformedToolCall(field, f"function name {name!r} is not an identifier")
    arguments: dict[str, Any] = {}
    end = 0
    for m in _PARAM.finditer(inner):
        if inner[end : m.start()].strip():
            raise MalformedToolCall(field, f"unexpected text {inner[end:m.start()].strip()[:40]!r} in {name}")
        key = m.group(1).strip()
        if not _NAME.match(key):
            raise MalformedToolCall(field, f"parameter name {key!r} is not an identifier")
        if key in arguments:
            raise MalformedToolCall(field, f"parameter {key!r} given twice")
        arguments[key] = _parse_value(m.group(2))
        end = m.end()
    rest = inner[end:]
    if rest.strip():
        raise MalformedToolCall(field, f"unexpected text {rest.strip()[:40]!r} in {name} (unclosed <parameter>?)")
    return {"name": name, "arguments": arguments}


def parse_tool_calls(text: str) -> list[dict]:
    """Every `<tool_call>` block of `text`, in order, as `{"name", "arguments"}`.

    Text outside the blocks is ignored (the model may think or explain around them); a block that
    is unclosed, nested or malformed inside raises `MalformedToolCall` naming `tool_call[i]`.
    """
    calls, pos, i = [], 0, 0
    while True:
        start = text.find(OPEN, pos)
        stray = text.find(CLOSE, pos)
        if start < 0:
            if stray >= 0:
                raise MalformedToolCall(f"tool_call[{i}]", f"{CLOSE} without a matching {OPEN}")
            return calls
        if 0 <= stray < start:
            raise MalformedToolCall(f"tool_call[{i}]", f"{CLOSE} without a matching {OPEN}")
        end = text.find(CLOSE, start)
        if end < 0:
            raise MalformedToolCall(f"tool_call[{i}]", f"{OPEN} is never closed")
        body = text[start + len(OPEN) : end]
        if OPEN in body:
            raise MalformedToolCall(f"tool_call[{i}]", f"nested {OPEN}")
        calls.append(_parse_block(body, f"tool_call[{i}]"))
        pos, i = end + len(CLOSE), i + 1

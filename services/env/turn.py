"""Reading one assistant turn: the part that may act, and its tool calls one block at a time.

`answer_part` drops the thinking (text up to the last `</think>`; a turn still inside `<think>` has
no answer). `split_tool_calls` reads every `<tool_call>` block on its own with
`services.common.toolcalls`, so one malformed block becomes one error in its place while the
blocks around it still run — as a real API answers each request of a batch. Pure functions.
"""

from __future__ import annotations

from services.common.toolcalls import CLOSE, OPEN, MalformedToolCall, parse_tool_calls


def answer_part(text: str) -> str:
    """After the last `</think>`; "" when a `<think>` never closes; the whole text without one."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    return "" if "<think>" in text else text


def split_tool_calls(text: str) -> list[dict | MalformedToolCall]:
    """Each `<tool_call>` block of `text` in order: {"name", "arguments"} or the MalformedToolCall it is."""
    out: list[dict | MalformedToolCall] = []
    pos = 0
    while True:
        start = text.find(OPEN, pos)
        field = f"tool_call[{len(out)}]"
        if CLOSE in text[pos:start if start >= 0 else len(text)]:
            out.append(MalformedToolCall(field, f"{CLOSE} without a matching {OPEN}"))
            field = f"tool_call[{len(out)}]"
        if start < 0:
            return out
        end, nxt = text.find(CLOSE, start), text.find(OPEN, start + len(OPEN))
        if end < 0 or 0 <= nxt < end:
            out.append(MalformedToolCall(field, f"{OPEN} is never closed"))
            if nxt < 0:
                return out
            pos = nxt
            continue
        try:
            out.append(parse_tool_calls(text[start:end + len(CLOSE)])[0])
        except MalformedToolCall as exc:
            out.append(MalformedToolCall(field, exc.message))
        pos = end + len(CLOSE)

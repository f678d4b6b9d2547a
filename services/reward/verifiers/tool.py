"""`tool`: the response's `<tool_call>` blocks against the task's `expected_calls`.

Each call must name a tool of `tools`, carry every required parameter and no parameter the tool
does not declare, with values of the declared JSON Schema types, and match an expected call's
arguments (numbers compare numerically; an optional parameter left out of the expected call is
accepted only at its declared default). Parallel calls match order-free; the counts must agree.
`expected_calls == []` means the right answer calls no tool. A malformed block is `invalid`, never a
correct abstention. This module knows nothing about gRPC or chat templates.
"""

from __future__ import annotations

from typing import Any

from services.common.errors import InvalidArgument
from services.common.toolcalls import MalformedToolCall, parse_tool_calls
from services.reward.verifiers.base import Check, Context, Outcome, correct, incorrect, invalid

_MISSING = object()


def same_value(a: Any, b: Any) -> bool:
    """Deep equality where numbers compare numerically (1 == 1.0) and booleans stay booleans."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return a == b


def _tool_table(task: Any) -> dict[str, dict]:
    tools = getattr(task, "tools", None)
    if not isinstance(tools, list):
        raise InvalidArgument("tools", f"domain 'tool' needs a list of tools, got {type(tools).__name__}")
    table = {}
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InvalidArgument(f"tools[{i}].name", "every tool needs a name")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise InvalidArgument(f"tools[{i}].parameters", "must be a JSON Schema object")
        table[fn["name"]] = params
    return table


def call_problems(call: dict, tools: dict[str, dict]) -> list[str]:
    """What is wrong with one call on its own: unknown tool, missing/unexpected parameters, types."""
    import jsonschema

    schema = tools.get(call["name"])
    if schema is None:
        return [f"unknown tool {call['name']!r}"]
    props = schema.get("properties", {})
    problems = [f"missing required parameter {p!r}" for p in schema.get("required", []) if p not in call["arguments"]]
    for key, value in call["arguments"].items():
        if key not in props:
            problems.append(f"unexpected parameter {key!r}")
            continue
        for err in jsonschema.Draft202012Validator(props[key]).iter_errors(value):
            problems.append(f"parameter {key!r}: {err.message}")
    return problems


def matches(call: dict, expected: dict, schema: dict) -> bool:
    """Same name and same argument values; an absent expected optional is accepted at its default."""
    if call["name"] != expected["name"]:
        return False
    want, got, props = expected.get("arguments") or {}, call["arguments"], schema.get("properties", {})
    for key in want.keys() | got.keys():
        if key in want:
            if key not in got or not same_value(got[key], want[key]):
                return False
        elif not same_value(got[key], props.get(key, {}).get("default", _MISSING)):
            return False
    return True


def tool_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """1 when the response makes exactly the expected calls (any order), each well-formed."""
    tools = _tool_table(task)
    expected = getattr(task, "expected_calls", None)
    if not isinstance(expected, list) or not all(isinstance(c, dict) and "name" in c for c in expected):
        raise InvalidArgument("expected_calls", "must be a list of {name, arguments} (empty = no call)")
    try:
        calls = parse_tool_calls(response)
    except MalformedToolCall as exc:
        return invalid(f"malformed tool call: {exc}")
    checks = []
    for i, call in enumerate(calls):
        problems = call_problems(call, tools)
        checks.append(Check(f"call[{i}] {call['name']}", not problems, "; ".join(problems) or "well-formed"))
    if not expected:
        if calls:
            return incorrect(f"called {calls[0]['name']!r} but no call was expected", checks)
        return correct("correctly made no tool call")
    unused = list(range(len(calls)))
    for j, want in enumerate(expected):
        hit = next((i for i in unused if matches(calls[i], want, tools.get(want["name"], {}))), None)
        if hit is not None:
            unused.remove(hit)
        checks.append(Check(f"expected[{j}] {want['name']}", hit is not None, "matched" if hit is not None else "no match"))
    failed = [c for c in checks if not c.passed]
    if len(calls) != len(expected):
        return incorrect(f"made {len(calls)} call(s), expected {len(expected)}", checks)
    if failed:
        return incorrect(f"{failed[0].name}: {failed[0].detail}", checks)
    return correct(f"all {len(expected)} expected call(s) made", checks)

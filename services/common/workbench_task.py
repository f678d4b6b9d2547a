"""A workbench row of NVIDIA's released RL data (NeMo Gym's `workbench` / `workplace_assistant` shape),
parsed as is into a plain task: the conversation, the tools offered, the ground-truth calls.

A row is `{"id", "responses_create_params": {"input": [system, user], "tools": [...]},
"ground_truth": [{"name", "arguments": "<JSON text>"}], "category", "environment_name": "workbench"}`.
The task is multi-turn: the policy calls tools, the environment answers from the WorkBench tables,
and the reward compares the tables' end state after the model's calls with their end state after
the ground-truth calls (so lookups and call order do not count). The tables belong to the WorkBench
benchmark, not to the released data. This module only reads rows; it knows nothing about tables,
episodes or rewards (the env service does).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from typing import Any

from services.common.errors import InvalidArgument

ENVIRONMENT_NAMES = ("workbench", "workplace_assistant")
"""NeMo Gym's names of this environment (renamed `workplace_assistant` after the Cascade-2 data)."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool of `responses_create_params.tools` (Responses API function tool)."""

    name: str
    description: str
    parameters: dict[str, Any]
    """A JSON Schema object of the arguments."""


@dataclass(frozen=True)
class ToolCall:
    """One call: the tool's name and its decoded arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class WorkbenchTask:
    """A workbench row, parsed: what an episode starts from and what its end state is compared with."""

    id: str
    messages: tuple[dict[str, str], ...]
    """The opening conversation ({"role", "content"}: the system date line, the user's request)."""
    tools: tuple[ToolSpec, ...]
    ground_truth: tuple[ToolCall, ...]
    """Calls whose end state is the right one (their order and any lookups do not count)."""
    category: str | None = None
    """e.g. `workbench_email`, `workbench_calendar`."""
    environment_name: str = "workbench"
    params: dict[str, Any] = field(default_factory=dict)
    """The rest of `responses_create_params` (temperature, parallel_tool_calls), as the row has it."""

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


def from_nemo_gym(record: dict[str, Any]) -> WorkbenchTask:
    """Parse one workbench row as the data has it; a malformed field raises InvalidArgument naming it."""
    if not isinstance(record, dict):
        raise InvalidArgument("record", f"must be a JSON object, got {type(record).__name__}")
    env = record.get("environment_name")
    if env not in ENVIRONMENT_NAMES:
        raise InvalidArgument("environment_name", f"must be one of {list(ENVIRONMENT_NAMES)}, got {env!r}")
    params = record.get("responses_create_params")
    if not isinstance(params, dict):
        raise InvalidArgument("responses_create_params", "must be an object with `input` and `tools`")
    messages = _messages(params.get("input"))
    tools = _tools(params.get("tools"))
    names = {t.name for t in tools}
    calls = _calls(record.get("ground_truth"), names)
    rid = record.get("id")
    if rid is None or isinstance(rid, bool) or not isinstance(rid, (int, str)) or rid == "":
        raise InvalidArgument("id", f"must be an integer or a non-empty string, got {rid!r}")
    category = record.get("category")
    if category is not None and not isinstance(category, str):
        raise InvalidArgument("category", f"must be a string, got {category!r}")
    rest = {k: v for k, v in params.items() if k not in ("input", "tools")}
    return WorkbenchTask(str(rid), messages, tools, calls, category, env, rest)


def _messages(source: Any) -> tuple[dict[str, str], ...]:
    field_name = "responses_create_params.input"
    if isinstance(source, str):
        return ({"role": "user", "content": source},)
    if not isinstance(source, list) or not source:
        raise InvalidArgument(field_name, "must be a non-empty list of messages or a string")
    out = []
    for i, msg in enumerate(source):
        if not isinstance(msg, dict) or msg.get("role") not in ("system", "developer", "user", "assistant"):
            raise InvalidArgument(f"{field_name}[{i}].role", f"must be system, user or assistant, got {msg!r:.80}")
        content = msg.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise InvalidArgument(f"{field_name}[{i}].content", "must be text")
        out.append({"role": "system" if msg["role"] == "developer" else msg["role"], "content": content})
    return tuple(out)


def _tools(source: Any) -> tuple[ToolSpec, ...]:
    if not isinstance(source, list) or not source:
        raise InvalidArgument("responses_create_params.tools", "a workbench row offers a non-empty list of tools")
    out = []
    for i, tool in enumerate(source):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None  # chat-completions nesting too
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidArgument(f"responses_create_params.tools[{i}].name", "must be a non-empty string")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise InvalidArgument(f"responses_create_params.tools[{i}].parameters", "must be a JSON Schema object")
        out.append(ToolSpec(fn["name"], str(fn.get("description") or ""), params))
    return tuple(out)


def _calls(source: Any, names: set[str]) -> tuple[ToolCall, ...]:
    if isinstance(source, str):  # newer rows keep the list as text: JSON, or Python's repr of it
        try:
            source = json.loads(source)
        except json.JSONDecodeError:
            try:
                source = ast.literal_eval(source)
            except (ValueError, SyntaxError):
                raise InvalidArgument("ground_truth", "is text but neither JSON nor a literal list of calls") from None
    if not isinstance(source, list):
        raise InvalidArgument("ground_truth", f"must be a list of {{name, arguments}} calls, got {source!r:.80}")
    out = []
    for i, call in enumerate(source):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise InvalidArgument(f"ground_truth[{i}].name", "every call needs a tool name")
        if call["name"] not in names:
            raise InvalidArgument(f"ground_truth[{i}].name", f"{call['name']!r} is not a tool of the row")
        args = call.get("arguments", {})
        if isinstance(args, str):  # the released data carries arguments as JSON text
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                raise InvalidArgument(f"ground_truth[{i}].arguments", f"is not valid JSON: {exc.msg}") from None
        if not isinstance(args, dict):
            raise InvalidArgument(f"ground_truth[{i}].arguments", f"must be a JSON object, got {args!r:.80}")
        out.append(ToolCall(call["name"], args))
    return tuple(out)

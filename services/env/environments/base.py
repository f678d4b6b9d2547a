"""What every environment shares: its one signature, the tool error, the score, the shared tool helpers.

An environment is a class with `name`, `description`, `tool_names` and five methods:
`parse(record) -> task` (its own task form; `InvalidArgument` naming the field), `open(task) -> state`
(the per-episode state: everything the episode's tools change, nothing shared with another episode),
`call(state, name, arguments, budget_s) -> str` (one tool call within `budget_s` seconds, at most
`timeout_s(name)`; `ToolError` for an answer the model should read as an error), `score(state, final) -> Score` (`final` = the answer text after the last
turn, None when the episode was cut by a limit) and `close(state)` (free what the episode started).
The core (`services/env/core.py`) does turns, limits, deadlines and parsing of tool calls; an
environment knows nothing about episodes' ids, gRPC or the other environments.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from services.common.errors import InvalidArgument


class ToolError(Exception):
    """A tool call the model gets back as error text (bad arguments, not found, timed out)."""


class EnvironmentFailure(Exception):
    """The environment, not the model, failed (sandbox down): the episode's verdict is ERROR."""


@dataclass(frozen=True)
class Score:
    """An episode's reward and why."""

    reward: float
    reason: str


@dataclass
class EpisodeState:
    """The part of an episode's state the core reads; environments subclass it with their own tables."""

    messages: list[dict]
    """The first observation: the prompt conversation."""
    tools: list[dict]
    """Function schemas offered ({"type": "function", "name", "description", "parameters"})."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Services:
    """What the service lends environments: its settings and the sandbox (None when not built)."""

    config: Any
    sandbox: Any = None


class Environment(ABC):
    """One multi-turn environment (see the module docstring for the contract)."""

    name: ClassVar[str]
    description: ClassVar[str]
    tool_names: ClassVar[tuple[str, ...]]

    def __init__(self, services: Services):
        self.services = services

    @abstractmethod
    def parse(self, record: dict) -> Any: ...

    @abstractmethod
    def open(self, task: Any) -> EpisodeState: ...

    @abstractmethod
    def call(self, state: EpisodeState, name: str, arguments: dict, budget_s: float) -> str: ...

    def timeout_s(self, name: str) -> float:
        """The deadline of one call of tool `name` (default: the service's tool_timeout_s)."""
        return self.services.config.tool_timeout_s

    @abstractmethod
    def score(self, state: EpisodeState, final: str | None) -> Score: ...

    def close(self, state: EpisodeState) -> None:
        """Free what the episode started (default: nothing outside `state`)."""
        return None


def function_schema(name: str, description: str, properties: dict, required: tuple[str, ...] = ()) -> dict:
    """A tool's JSON schema in the Responses API shape NeMo Gym rows carry."""
    return {
        "type": "function", "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": list(required),
                       "additionalProperties": False},
        "strict": False,
    }


def coerce_arguments(schema: dict, arguments: dict) -> dict:
    """`arguments` checked against the schema's properties: unknown names are a ToolError; a value
    of a `string` property that the call format read as JSON (`30`, `true`) is made a string again,
    an `integer` given as digits becomes an int; None values are dropped (as if not given)."""
    props = schema["parameters"]["properties"]
    out = {}
    for key, value in arguments.items():
        if key not in props:
            raise ToolError(f"unknown parameter {key!r} of {schema['name']}; parameters: {', '.join(props) or 'none'}")
        if value is None:
            continue
        kind = props[key].get("type")
        if kind == "string" and not isinstance(value, str):
            value = json.dumps(value) if isinstance(value, (dict, list, bool)) else str(value)
        elif kind == "integer" and not isinstance(value, int):
            try:
                value = int(str(value).strip())
            except ValueError:
                raise ToolError(f"parameter {key!r} of {schema['name']} must be an integer, got {value!r}") from None
        out[key] = value
    return out


def messages_of(record: dict, field_name: str = "messages") -> list[dict]:
    """The prompt conversation of a record: `messages`, or NeMo Gym's `responses_create_params.input`."""
    params = record.get("responses_create_params")
    if isinstance(params, dict) and "input" in params:
        raw, where = params["input"], "responses_create_params.input"
        if isinstance(raw, str):
            raw = [{"role": "user", "content": raw}]
    else:
        raw, where = record.get(field_name), field_name
    if not isinstance(raw, list) or not raw:
        raise InvalidArgument(where, "must be a non-empty list of {role, content} messages")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not isinstance(m.get("content"), (str, list)):
            raise InvalidArgument(f"{where}[{i}]", "must be a {role, content} message")
        role = "system" if m.get("role") == "developer" else m.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise InvalidArgument(f"{where}[{i}].role", f"{m.get('role')!r} is not system, user, assistant or tool")
        content = m["content"]
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append({"role": role, "content": content})
    return out


def truncate(text: str, budget: int) -> str:
    """`text` cut to `budget` characters with a note of what was cut (the note fits in the budget)."""
    if len(text) <= budget:
        return text
    note = f"\n... [output truncated: {len(text) - budget} more characters]"
    keep = max(0, budget - len(note))
    return text[:keep] + f"\n... [output truncated: {len(text) - keep} more characters]"

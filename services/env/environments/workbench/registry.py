"""The workbench's tool registry: name -> Tool (its JSON schema beside its function) and shared helpers.

A tool function takes the episode's `Tables` and the call's arguments (checked against the schema
by the environment) and returns a JSON-able answer; it raises `ToolError` for an answer the model
should read as an error. Toolkits (email, calendar, analytics, project management, CRM, company
directory) register with `@tool`. This module knows nothing about episodes or rewards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from services.env.environments.base import ToolError, function_schema


@dataclass(frozen=True)
class Tool:
    schema: dict
    fn: Callable
    writes: bool
    """Whether it changes a table the reward compares (lookups do not count)."""


TOOLS: dict[str, Tool] = {}


def tool(name: str, description: str, properties: dict, required: tuple[str, ...] = (), writes: bool = False):
    """Register `fn` as tool `name` with a JSON schema of `properties` (name -> (type, description))."""
    props = {k: {"type": t, "description": d} for k, (t, d) in properties.items()}

    def register(fn: Callable) -> Callable:
        TOOLS[name] = Tool(function_schema(name, description, props, required), fn, writes)
        return fn

    return register


def when(text: str | None, what: str) -> datetime:
    """A date or date-time argument (YYYY-MM-DD[ HH:MM:SS]); ToolError naming `what` otherwise."""
    try:
        return datetime.fromisoformat(str(text).strip())
    except ValueError:
        raise ToolError(f"{what} must be a date YYYY-MM-DD or a time YYYY-MM-DD HH:MM:SS, got {text!r}") from None


def find(rows: list[dict], column: str, value: str | None, what: str) -> dict:
    """The row whose `column` equals `value`; ToolError "<what> not found" otherwise."""
    for row in rows:
        if row[column] == value:
            return row
    raise ToolError(f"{what} {value!r} not found")


def next_id(rows: list[dict], column: str, width: int = 8) -> str:
    """WorkBench's new id: the largest id (compared as text) plus one, zero-padded to `width` (0 = no padding)."""
    top = max((r[column] for r in rows if r[column]), default="0")
    return str(int(top) + 1).zfill(width)


def paginate(rows: list, page: int, page_size: int, noun: str) -> dict:
    """Page `page` (clamped to the pages there are) of `rows`, with WorkBench's pagination block."""
    if page_size < 1:
        raise ToolError(f"page_size must be at least 1, got {page_size}")
    pages = (len(rows) + page_size - 1) // page_size
    page = max(1, min(page, pages)) if pages else 1
    start = (page - 1) * page_size
    return {noun: rows[start:start + page_size],
            "pagination": {f"total_{noun}": len(rows), "page": page, "page_size": page_size, "total_pages": pages}}


def need(**values) -> None:
    """ToolError naming the first argument that is missing or empty."""
    for key, value in values.items():
        if value is None or value == "":
            raise ToolError(f"{key} not provided")


def valid_email(text: str) -> bool:
    return "@" in text and "." in text

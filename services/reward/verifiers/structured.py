"""`structured`: the response's JSON (bare or in a ```json fence) validated against `schema_str`.

Reasons are typed, their first word one of `empty`, `parse_error` (verdict invalid),
`validation_error` (incorrect) or `schema_error` (the task's own schema is broken: verdict error,
so the sample is masked out rather than punished). Formats (`date`, `email`, ...) are checked.
This module knows nothing about gRPC or deadlines.
"""

from __future__ import annotations

import json
import re
from typing import Any

from services.reward.verifiers.base import Check, Context, Outcome, correct, error, incorrect, invalid, need

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|Json)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_json_text(response: str) -> str:
    """The last ```json (or bare ```) fenced block if there is one, else the whole response, stripped."""
    blocks = _FENCE.findall(response)
    return (blocks[-1] if blocks else response).strip()


def load_schema(schema_str: str) -> tuple[Any, str | None]:
    """(validator, None) for a valid schema, or (None, reason) when the schema itself is broken."""
    import jsonschema

    try:
        schema = json.loads(schema_str)
    except ValueError as exc:
        return None, f"schema_error: schema_str is not JSON ({exc})"
    if not isinstance(schema, (dict, bool)):
        return None, "schema_error: schema_str must be a JSON object"
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return None, f"schema_error: {exc.message}"
    return cls(schema, format_checker=cls.FORMAT_CHECKER), None


def structured_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """1 when the response parses as JSON and validates against the task's JSON Schema."""
    validator, problem = load_schema(need(task, "schema_str", str))
    if problem:
        return error(problem)
    text = extract_json_text(response)
    if not text:
        return invalid("empty: no JSON in the response")
    try:
        value = json.loads(text)
    except ValueError as exc:
        return invalid(f"parse_error: {exc}")
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    checks = [Check("/" + "/".join(map(str, e.absolute_path)), False, e.message) for e in errors[:20]]
    if errors:
        first = errors[0]
        where = "/" + "/".join(map(str, first.absolute_path))
        return incorrect(f"validation_error: at {where}: {first.message}", checks)
    return correct("valid against the schema", [Check("schema", True, "")])

"""`structured`: the response's JSON (bare or in a ```json fence) validated against `schema_str`.

Reasons are typed, their first word one of `empty`, `parse_error` (verdict invalid),
`validation_error` (incorrect) or `schema_error` (the task's own schema is broken: verdict error,
so the sample is masked out rather than punished). Formats (`date`, `email`, ...) are checked.

NeMo Gym rows (prompt in `responses_create_params`, or a `schema_type`) follow NeMo Gym's rule
instead: the whole response is parsed in the row's `schema_type` (json, yaml, toml, csv; no fence is
stripped) and the schema is made strict first — every object's properties all required and no
others allowed; formats (`date`, `email`) are not checked, as NeMo Gym's OpenAPI validator does not. This module knows nothing about gRPC or deadlines.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tomllib
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


def strictify(schema: Any) -> Any:
    """A copy of `schema` where every object with `properties` requires all of them and allows no others."""
    if isinstance(schema, list):
        return [strictify(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strictify(v) for k, v in schema.items()}
    if "properties" in out and isinstance(out["properties"], dict):
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def _coerce_csv(rows: list[dict], schema: dict) -> list[dict]:
    """CSV cells are text: numbers and booleans are read as the schema's item properties declare them."""
    props = (schema.get("items", schema) or {}).get("properties", {})

    def cell(value: Any, kind: Any) -> Any:
        for k in kind if isinstance(kind, list) else [kind]:
            if k == "null" and value in ("", None):
                return None
            try:
                if k == "integer":
                    return int(value)
                if k == "number":
                    return float(value)
            except (TypeError, ValueError):
                continue
            if k == "boolean" and str(value).lower() in ("true", "1", "false", "0"):
                return str(value).lower() in ("true", "1")
        return value

    return [{k: cell(v, props.get(k, {}).get("type", "string")) for k, v in row.items()} for row in rows]


def parse_as(schema_type: str, text: str, schema: Any) -> Any:
    """The response text parsed in its format; raises ValueError (or the parser's error) when it does not parse."""
    kind = schema_type.lower()
    if kind == "json":
        return json.loads(text)
    if kind == "yaml":
        import yaml

        return yaml.safe_load(text)
    if kind == "toml":
        return tomllib.loads(text)
    if kind == "csv":
        return _coerce_csv(list(csv.DictReader(io.StringIO(text))), schema if isinstance(schema, dict) else {})
    raise NotImplementedError(f"schema_type {schema_type!r} is not parsed here (json, yaml, toml, csv are)")


def nemo_gym_structured(task: Any, response: str) -> Outcome:
    """NeMo Gym's rule: the whole text parses in `schema_type` and validates against the strict schema."""
    if not response.strip():
        return invalid("empty: no response text")
    try:
        schema = strictify(json.loads(need(task, "schema_str", str)))
    except ValueError as exc:
        return error(f"schema_error: schema_str is not JSON ({exc})")
    import jsonschema
    import yaml

    try:  # NeMo Gym validates with OpenAPI 3.1's dialect (JSON Schema 2020-12), formats not checked
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return error(f"schema_error: {exc.message}")
    validator = jsonschema.Draft202012Validator(schema)

    kind = getattr(task, "schema_type", None) or "json"
    try:
        value = parse_as(kind, response, schema)
    except NotImplementedError as exc:
        return error(f"schema_error: {exc}")
    except (ValueError, csv.Error, yaml.YAMLError) as exc:  # TOML's and JSON's errors are ValueErrors
        return invalid(f"parse_error: {type(exc).__name__}: {str(exc)[:200]}")
    return _validated(validator, value, "valid against the strict schema")


def structured_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """1 when the response parses as JSON and validates against the task's JSON Schema."""
    if getattr(task, "nemo_gym_shaped", False) or getattr(task, "schema_type", None) is not None:
        return nemo_gym_structured(task, response)
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
    return _validated(validator, value, "valid against the schema")


def _validated(validator: Any, value: Any, ok: str) -> Outcome:
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    checks = [Check("/" + "/".join(map(str, e.absolute_path)), False, e.message) for e in errors[:20]]
    if errors:
        first = errors[0]
        where = "/" + "/".join(map(str, first.absolute_path))
        return incorrect(f"validation_error: at {where}: {first.message}", checks)
    return correct(ok, [Check("schema", True, "")])

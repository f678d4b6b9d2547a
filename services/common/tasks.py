"""Task records: one prompt of one domain, with what its verifier needs to score a response.

A record is one JSONL line. NVIDIA's released Nemotron-Cascade-2 RL rows (NeMo Gym records) are
read exactly as they are: the prompt in `responses_create_params.input` (a list of messages or a
string), integer ids, null `kwargs` entries, and a domain inferred from the row's shape when it
names none (see `nemo_gym.py`). Plain `messages` or a plain `prompt` string work too; all three are
read into `messages`. Unknown extra fields are kept, never rejected. Per-domain rules are small functions (one per domain, one
signature, in `DOMAIN_CHECKS`) that raise `InvalidArgument` naming the field.

Per-domain fields (the reward verifiers read exactly these):
- math, mcqa, long_context: `ground_truth` (mcqa: the letter, plus `choices` {"A": ...}; NeMo Gym
  rows: `options` [{"A": ...}], `expected_answer`, `grading_mode`);
- code: `tests` = [{"input": "1 2\\n", "output": "3\\n"} | {"assert": "add(1, 2) == 3"}], `entry_point`;
- if: `instruction_id_list` (IFEval ids) + `kwargs` (one dict per id, IFEval argument names);
- structured: `schema_str` (a JSON schema, as text; NeMo Gym rows add `schema_type`);
- tool: `tools` [{"name", "description", "parameters"}], `expected_calls` [{"name", "arguments"}];
- swe: `repo` {"files": {path: text}}, `patch_tests` {"fail_to_pass", "pass_to_pass"}, `reference_patch`;
  NeMo Gym rows: `instance` + `metadata` {relevant_file_contents, image};
- workbench (multi-turn, NeMo Gym rows only): `environment_name`, `ground_truth` calls, `category`;
- python (multi-turn, tool-integrated reasoning): `messages`, `ground_truth` (the answer);
- rlhf: `messages`; preference pairs add `chosen` and `rejected`.

This module knows nothing about how records are generated, served or scored.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from services.common import nemo_gym
from services.common.errors import InvalidArgument

Domain = Literal["math", "code", "if", "mcqa", "structured", "tool", "rlhf", "long_context", "swe", "workbench", "python"]
DOMAINS: tuple[str, ...] = get_args(Domain)

# Fields that parquet / CSV exports sometimes carry as JSON text; decoded when they arrive as a string.
_JSON_TEXT_FIELDS = (
    "kwargs",
    "tests",
    "tools",
    "expected_calls",
    "repo",
    "patch_tests",
    "choices",
    "metadata",
)


class Message(BaseModel):
    """One chat turn."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool"]
    """Who speaks; the Responses API's `developer` is read as `system`."""
    content: str
    """The turn's text (a list of content parts is joined into one string)."""


class TaskRecord(BaseModel):
    """One task: the prompt messages plus the fields its domain's verifier needs."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    """Unique within a file; derived from a hash of the record when the source has none."""
    domain: Domain
    """Which verifier scores it (and which teacher serves it in MOPD)."""
    messages: list[Message] = Field(min_length=1)
    """The prompt conversation (no assistant answer for RL tasks)."""
    ground_truth: str | list[str] | list[dict[str, Any]] | None = None
    """The reference answer (math, mcqa letter, long_context fact; structured: an example JSON;
    workbench: the calls [{"name", "arguments": JSON text}])."""
    instruction_id_list: list[str] = Field(default_factory=list)
    """IFEval instruction ids, e.g. `keywords:existence` (domain `if`)."""
    kwargs: list[dict[str, Any] | None] = Field(default_factory=list)
    """One IFEval argument dict per instruction id, same order and length (null = no arguments)."""
    schema_str: str | None = None
    """JSON schema (as text) the response must satisfy (domain `structured`)."""
    tests: list[dict[str, Any]] = Field(default_factory=list)
    """Code tests: {"input", "output"} stdin/stdout pairs or {"assert": expression}."""
    entry_point: str | None = None
    """Name of the function the code tests call, when they call one."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """Tools offered: {"name", "description", "parameters": JSON-schema object}."""
    expected_calls: list[dict[str, Any]] | None = None
    """Calls the answer must make, {"name", "arguments"}; [] = call no tool; None = not a tool task."""
    repo: dict[str, Any] | None = None
    """SWE repository snapshot: {"files": {relative path: text}}."""
    patch_tests: dict[str, Any] | None = None
    """SWE tests: {"fail_to_pass": [pytest ids], "pass_to_pass": [pytest ids]}."""
    reference_patch: str | None = None
    """A unified diff that fixes the SWE repository (applies with `patch -p1` / `git apply`)."""
    choices: dict[str, str] | None = None
    """MCQA options by letter, also spelled out in the prompt."""
    chosen: str | None = None
    """RLHF preference pair: the preferred assistant response."""
    rejected: str | None = None
    """RLHF preference pair: the dispreferred assistant response (may be empty)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form extras, e.g. {"level": 2}; NeMo Gym SWE rows: relevant_file_contents, image."""
    options: list[dict[str, str | None]] | None = None
    """NeMo Gym MCQA: the options as one-key objects [{"A": text}, ...]."""
    expected_answer: str | None = None
    """NeMo Gym MCQA: the gold letter."""
    grading_mode: str | None = None
    """NeMo Gym: how MCQA extracts the letter (strict_single_letter_boxed, ...) or IF's binary / fraction."""
    schema_type: str | None = None
    """NeMo Gym structured outputs: the format the response is parsed as (json, yaml, toml, csv, xml)."""
    instance: dict[str, Any] | None = None
    """NeMo Gym SWE: the SWE-Gym instance (instance_id, repo, FAIL_TO_PASS, PASS_TO_PASS, scripts)."""
    environment_name: str | None = None
    """NeMo Gym multi-turn environment of the row (`workbench`)."""
    category: str | None = None
    """NeMo Gym workbench: the task's category, e.g. `workbench_email`."""
    verifier_metadata: dict[str, Any] | None = None
    """NeMo Gym IF rows of the newer layout: instruction_id_list, kwargs, grading_mode live here."""

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise InvalidArgument("record", f"must be a JSON object, got {type(data).__name__}")
        data = dict(data)
        for name in _JSON_TEXT_FIELDS:
            if isinstance(data.get(name), str):
                data[name] = _decode_json_text(name, data[name])
        if isinstance(data.get("ground_truth"), (int, float)) and not isinstance(data["ground_truth"], bool):
            data["ground_truth"] = str(data["ground_truth"])
        if isinstance(data.get("id"), int) and not isinstance(data["id"], bool):
            data["id"] = str(data["id"])  # NeMo Gym rows number their ids
        data["messages"] = _messages_of(data)
        if "domain" not in data or data["domain"] is None:
            data["domain"] = _infer_domain(data)
        if data.get("id") is None or data.get("id") == "":
            data["id"] = _derive_id(data)
        return data

    @model_validator(mode="after")
    def _check_domain(self) -> TaskRecord:
        DOMAIN_CHECKS[self.domain](self)
        return self

    @classmethod
    def parse(cls, data: Any) -> TaskRecord:
        """Validate a decoded record; any problem raises `InvalidArgument` naming the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "record"
            raise InvalidArgument(field, f"{first['msg']} (got {_short(first.get('input'))})") from None

    @classmethod
    def from_json(cls, text: str) -> TaskRecord:
        """The record of one JSON document (the wire form, e.g. reward ScoreItem.task_json)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgument("task_json", f"is not valid JSON: {exc.msg} at char {exc.pos}") from None
        return cls.parse(data)

    @property
    def nemo_gym_shaped(self) -> bool:
        """Whether the row is in NeMo Gym's shape (its prompt in `responses_create_params`): such rows
        are scored by NeMo Gym's rules where they differ from the looser rules of our own records."""
        return "responses_create_params" in (self.model_extra or {})

    def prompt_text(self) -> str:
        """All message contents joined (a key for de-duplication and split checks)."""
        return "\n".join(f"{m.role}: {m.content}" for m in self.messages)


def task_to_json(record: TaskRecord) -> str:
    """One compact JSON line; empty optional fields are left out, extra fields kept."""
    data = record.model_dump(mode="json", exclude_defaults=True)
    ordered = {"id": record.id, "domain": record.domain, **data}
    return json.dumps(ordered, ensure_ascii=False, separators=(",", ":"))


class TaskFileError(InvalidArgument):
    """A bad record in a task file: `path:line: field 'name': message`."""

    def __init__(self, path: str | Path, line: int, field: str, message: str):
        super().__init__(field, message)
        self.path = str(path)
        self.line = line
        self.args = (f"{self.path}:{line}: field '{field}': {message}",)

    def __str__(self) -> str:
        return self.args[0]


@overload
def load_tasks(
    path: str | Path, errors: Literal["raise"] = ..., domain: str | None = ...
) -> list[TaskRecord]: ...
@overload
def load_tasks(
    path: str | Path, errors: Literal["collect"], domain: str | None = ...
) -> tuple[list[TaskRecord], list[TaskFileError]]: ...


def load_tasks(path, errors="raise", domain=None):
    """Read a JSONL (or .parquet) task file.

    errors="raise": the first bad record raises `TaskFileError` (file, line, field).
    errors="collect": returns (good records, errors) so nothing is dropped silently.
    domain: used for records that carry no `domain` field (e.g. one NVIDIA subset per file).
    """
    if errors not in ("raise", "collect"):
        raise InvalidArgument("errors", f"{errors!r} is not 'raise' or 'collect'")
    if domain is not None and domain not in DOMAINS:
        raise InvalidArgument("domain", f"{domain!r} is not one of {list(DOMAINS)}")
    path = Path(path)
    if not path.is_file():
        raise InvalidArgument("path", f"{path} is not a file")
    good: list[TaskRecord] = []
    bad: list[TaskFileError] = []
    first_line: dict[str, int] = {}
    for line_no, raw in _rows(path):
        try:
            if isinstance(raw, TaskFileError):
                raise raw
            if domain is not None and isinstance(raw, dict) and raw.get("domain") is None:
                raw = {**raw, "domain": domain}
            try:
                record = TaskRecord.parse(raw)
            except InvalidArgument as exc:
                raise TaskFileError(path, line_no, exc.field, exc.message) from None
            if record.id in first_line and not _names_an_id(raw):
                # an id-less row identical to an earlier one (released data has a few): numbered, not refused
                record = record.model_copy(update={"id": f"{record.id}-{line_no}"})
            if record.id in first_line:
                raise TaskFileError(
                    path, line_no, "id", f"{record.id!r} repeats line {first_line[record.id]}"
                )
            first_line[record.id] = line_no
            good.append(record)
        except TaskFileError as exc:
            if errors == "raise":
                raise
            bad.append(exc)
    return good if errors == "raise" else (good, bad)


def _rows(path: Path):
    """(line number, decoded object or TaskFileError) for each non-blank line / parquet row."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield i, row
        return
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as exc:
                yield i, TaskFileError(path, i, "line", f"is not valid JSON: {exc.msg} at column {exc.colno}")


def _messages_of(data: dict) -> list[dict]:
    if data.get("messages") is not None:
        source, field = data["messages"], "messages"
    elif data.get("responses_create_params") is not None:
        params = data["responses_create_params"]
        if not isinstance(params, dict) or "input" not in params:
            raise InvalidArgument("responses_create_params", "must be an object with an `input` field")
        source, field = params["input"], "responses_create_params.input"
        if isinstance(params.get("instructions"), str) and params["instructions"]:
            source = [{"role": "system", "content": params["instructions"]}] + (
                [{"role": "user", "content": source}] if isinstance(source, str) else list(source or [])
            )
    elif data.get("prompt") is not None:
        if not isinstance(data["prompt"], str):
            raise InvalidArgument("prompt", f"must be a string, got {_short(data['prompt'])}")
        source, field = data["prompt"], "prompt"
    else:
        raise InvalidArgument(
            "messages", "missing: give `messages`, `responses_create_params.input` or `prompt`"
        )
    if isinstance(source, str):
        return [{"role": "user", "content": source}]
    if not isinstance(source, list) or not source:
        raise InvalidArgument(field, "must be a non-empty list of messages or a string")
    out = []
    for i, msg in enumerate(source):
        if not isinstance(msg, dict):
            raise InvalidArgument(
                f"{field}[{i}]", f"must be an object with role and content, got {_short(msg)}"
            )
        msg = {k: v for k, v in msg.items() if k != "type"}
        if msg.get("role") == "developer":
            msg["role"] = "system"
        if isinstance(msg.get("content"), list):  # Responses API content parts
            msg["content"] = "".join(p.get("text", "") for p in msg["content"] if isinstance(p, dict))
        out.append(msg)
    return out


def _infer_domain(data: dict) -> str:
    domain = nemo_gym.infer_domain(data)
    if domain is None:
        raise InvalidArgument(
            "domain", f"missing, and the row fits no NeMo Gym shape ({nemo_gym.SHAPE_HINT}); or name one of {list(DOMAINS)}"
        )
    return domain


_ID_KEYS = ("key", "uuid", "task_id")


def _names_an_id(raw: dict) -> bool:
    return any(raw.get(k) not in (None, "") for k in ("id", *_ID_KEYS))


def _derive_id(data: dict) -> str:
    for key in _ID_KEYS:
        if data.get(key) not in (None, ""):
            return str(data[key])
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    return f"{data.get('domain', 'task')}-{digest[:16]}"


def _decode_json_text(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(name, f"is a string but not valid JSON: {exc.msg}") from None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- per-domain rules: one function per domain, `check(record) -> None`, raising InvalidArgument ---


def _need_ground_truth(rec: TaskRecord) -> None:
    gt = rec.ground_truth
    if gt is None or gt == "" or gt == []:
        raise InvalidArgument("ground_truth", f"is required for domain {rec.domain!r}")


def _check_mcqa(rec: TaskRecord) -> None:
    if rec.expected_answer is not None or rec.options is not None:
        nemo_gym.check_mcqa(rec)
        return
    _need_ground_truth(rec)
    if rec.choices is not None:
        if not rec.choices or not all(re.fullmatch(r"[A-Z]", k) for k in rec.choices):
            raise InvalidArgument("choices", f"keys must be capital letters, got {sorted(rec.choices)}")
        if not isinstance(rec.ground_truth, str) or rec.ground_truth not in rec.choices:
            raise InvalidArgument("ground_truth", f"{rec.ground_truth!r} is not a key of choices")


def _check_code(rec: TaskRecord) -> None:
    if not rec.tests:
        raise InvalidArgument("tests", "code tasks need at least one test")
    for i, test in enumerate(rec.tests):
        io = isinstance(test.get("input"), str) and isinstance(test.get("output"), str)
        expr = isinstance(test.get("assert"), str) and test["assert"].strip() != ""
        if io == expr:
            raise InvalidArgument(
                f"tests[{i}]", f"needs `input`+`output` strings or `assert`, got {sorted(test)}"
            )
    if rec.entry_point is not None and not rec.entry_point.isidentifier():
        raise InvalidArgument("entry_point", f"{rec.entry_point!r} is not a python identifier")


def _check_if(rec: TaskRecord) -> None:
    ids, kwargs, _ = nemo_gym.if_fields(rec)
    if rec.verifier_metadata is not None:
        if not isinstance(ids, list) or not ids or not isinstance(kwargs, list) or len(kwargs) != len(ids):
            raise InvalidArgument("verifier_metadata", "needs instruction_id_list and one kwargs entry per id")
        return
    if not rec.instruction_id_list:
        raise InvalidArgument("instruction_id_list", "`if` tasks need at least one instruction id")
    if len(rec.kwargs) != len(rec.instruction_id_list):
        got, want = len(rec.kwargs), len(rec.instruction_id_list)
        raise InvalidArgument("kwargs", f"has {got} entries but instruction_id_list has {want}")
    for i, iid in enumerate(rec.instruction_id_list):
        if not re.fullmatch(r"[a-z_]+:[a-z_0-9]+", iid):
            raise InvalidArgument(f"instruction_id_list[{i}]", f"{iid!r} is not like 'keywords:existence'")


def _check_structured(rec: TaskRecord) -> None:
    if not rec.schema_str:
        raise InvalidArgument("schema_str", "`structured` tasks need a JSON schema")
    try:
        schema = json.loads(rec.schema_str)
    except json.JSONDecodeError as exc:
        raise InvalidArgument("schema_str", f"does not parse as JSON: {exc.msg} at char {exc.pos}") from None
    if not isinstance(schema, dict):
        raise InvalidArgument("schema_str", f"must be a JSON object (a schema), got {type(schema).__name__}")
    nemo_gym.check_structured(rec)


def _check_tool(rec: TaskRecord) -> None:
    names = []
    for i, tool in enumerate(rec.tools):
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise InvalidArgument(f"tools[{i}].name", "must be a non-empty string")
        if not isinstance(tool.get("parameters", {}), dict):
            raise InvalidArgument(f"tools[{i}].parameters", "must be a JSON-schema object")
        names.append(tool["name"])
    if rec.expected_calls is None:
        raise InvalidArgument("expected_calls", "is required for `tool` tasks ([] means: call no tool)")
    for i, call in enumerate(rec.expected_calls):
        if call.get("name") not in names:
            raise InvalidArgument(
                f"expected_calls[{i}].name", f"{call.get('name')!r} is not in tools {names}"
            )
        if not isinstance(call.get("arguments", {}), dict):
            raise InvalidArgument(f"expected_calls[{i}].arguments", "must be an object")


def _check_swe(rec: TaskRecord) -> None:
    if rec.instance is not None:
        nemo_gym.check_swe(rec)
        return
    files = (rec.repo or {}).get("files")
    if not isinstance(files, dict) or not files or not all(isinstance(v, str) for v in files.values()):
        raise InvalidArgument("repo", 'must be {"files": {path: text, ...}} with at least one file')
    pt = rec.patch_tests or {}
    if not isinstance(pt.get("fail_to_pass"), list) or not pt["fail_to_pass"]:
        raise InvalidArgument("patch_tests.fail_to_pass", "must list at least one pytest id")
    for key in ("fail_to_pass", "pass_to_pass"):
        for i, test_id in enumerate(pt.get(key) or []):
            if not isinstance(test_id, str) or test_id.split("::")[0] not in files:
                raise InvalidArgument(f"patch_tests.{key}[{i}]", f"{test_id!r} names no file of repo.files")


def _check_rlhf(rec: TaskRecord) -> None:
    if (rec.chosen is None) != (rec.rejected is None):
        missing = "rejected" if rec.rejected is None else "chosen"
        raise InvalidArgument(missing, "a preference pair needs both chosen and rejected")
    if rec.chosen is not None and not rec.chosen.strip():
        raise InvalidArgument("chosen", "must not be empty")


DOMAIN_CHECKS: dict[str, Callable[[TaskRecord], None]] = {
    "math": _need_ground_truth,
    "code": _check_code,
    "if": _check_if,
    "mcqa": _check_mcqa,
    "structured": _check_structured,
    "tool": _check_tool,
    "rlhf": _check_rlhf,
    "long_context": _need_ground_truth,
    "swe": _check_swe,
    "workbench": nemo_gym.check_workbench,
    "python": _need_ground_truth,
}

"""The workbench's task form and `from_record`, which reads NeMo Gym's workbench row as is and our own.

NeMo Gym row (read by services.common.workbench_task, the one parser of it): `environment_name:
workbench` (or `workplace_assistant`), the prompt in `responses_create_params.input`, the
tools offered in `responses_create_params.tools`, `ground_truth` = [{"name", "arguments": JSON
text}], `category` (e.g. workbench_email); its tables are WorkBench's (the service's
`workbench_tables` folder). Ours: `messages`, `ground_truth` (arguments as JSON text or an object),
`tables: {"synthetic": SEED}` (tables made in code, `tables.synthetic`), optional `category`, optional
`tool_names` (the workbench tools offered, by name; unset = all 27).
Errors name the field. This module knows nothing about running tools.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from services.common.errors import InvalidArgument
from services.common.workbench_task import from_nemo_gym
from services.env.environments.base import messages_of
from services.env.environments.workbench.registry import TOOLS


@dataclass(frozen=True)
class WorkbenchTask:
    id: str
    messages: list[dict]
    ground_truth: list[dict]
    """Expected calls, {"name", "arguments": dict}; the reward replays them on fresh tables."""
    tools: list[dict] | None
    """The row's own tool schemas (NeMo Gym rows), or None = every workbench tool, ours."""
    synthetic_seed: int | None
    """Seed of our own tables; None = WorkBench's tables from the configured folder."""
    category: str = ""


def _calls(raw, where: str) -> list[dict]:
    if not isinstance(raw, list):
        raise InvalidArgument(where, f"must be a list of {{name, arguments}} calls, got {type(raw).__name__}")
    calls = []
    for i, call in enumerate(raw):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise InvalidArgument(f"{where}[{i}].name", "must be a tool name (string)")
        if call["name"] not in TOOLS:
            raise InvalidArgument(f"{where}[{i}].name", f"{call['name']!r} is not a workbench tool")
        args = call.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError as exc:
                raise InvalidArgument(f"{where}[{i}].arguments", f"is not JSON: {exc}") from None
        if not isinstance(args, dict):
            raise InvalidArgument(f"{where}[{i}].arguments", "must be a JSON object")
        calls.append({"name": call["name"], "arguments": args})
    return calls


def from_record(record: dict) -> WorkbenchTask:
    """The task of a NeMo Gym workbench row or of one of our synthetic records (see the module doc)."""
    if not isinstance(record, dict):
        raise InvalidArgument("task_json", f"must be a JSON object, got {type(record).__name__}")
    if "environment_name" in record:  # NeMo Gym's row: one parser for it, services.common.workbench_task
        return _from_nemo_gym(record)
    name = record.get("environment", "workbench")
    if name != "workbench":
        raise InvalidArgument("environment_name", f"is {name!r}, not 'workbench'")
    messages = messages_of(record)
    params = record.get("responses_create_params")
    tools = params.get("tools") if isinstance(params, dict) else None
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools):
            raise InvalidArgument("responses_create_params.tools", "must be a list of function schemas with names")
    names = record.get("tool_names")
    if names is not None:
        if tools is not None:
            raise InvalidArgument("tool_names", "give the tools either as responses_create_params.tools or by name, not both")
        if not isinstance(names, list) or not names:
            raise InvalidArgument("tool_names", "must be a non-empty list of workbench tool names")
        unknown = [n for n in names if n not in TOOLS]
        if unknown:
            raise InvalidArgument("tool_names", f"{unknown} are not workbench tools")
        tools = [TOOLS[n].schema for n in dict.fromkeys(names)]
    seed = None
    tables = record.get("tables")
    if tables is not None:
        if not (isinstance(tables, dict) and isinstance(tables.get("synthetic"), int)):
            raise InvalidArgument("tables", f'must be {{"synthetic": SEED}} (an int), got {tables!r}')
        seed = tables["synthetic"]
    truth = _calls(record.get("ground_truth"), "ground_truth")
    rid = record.get("id")
    rid = str(rid) if rid is not None else hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]
    return WorkbenchTask(rid, messages, truth, tools, seed, str(record.get("category") or ""))


def _from_nemo_gym(record: dict) -> WorkbenchTask:
    """A NeMo Gym workbench / workplace_assistant row, read by services.common.workbench_task; the
    ground-truth calls must name tools this environment runs."""
    row = from_nemo_gym(record)
    truth = _calls([{"name": c.name, "arguments": c.arguments} for c in row.ground_truth], "ground_truth")
    tools = list(record["responses_create_params"]["tools"])  # offered as the row has them (checked by the parser)
    return WorkbenchTask(row.id, [dict(m) for m in row.messages], truth, tools, None, row.category or "")

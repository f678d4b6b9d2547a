"""`workbench`: a workplace assistant's 27 tools over state tables, rewarded by the tables' end state.

The tools are WorkBench's as NeMo Gym serves them (email, calendar, analytics, project management,
CRM, company directory; names, parameters and behaviour), registered in the toolkit modules. Each
episode gets its own copy of the tables; every call the model makes runs on it. The reward is
NeMo Gym's: 1 when the episode's tables end in the state that replaying the task's ground-truth calls
on fresh tables gives (lookups and call order do not count; values compared lower-cased except
status, list_name and board), else 0. One deliberate difference: NeMo Gym compares pandas frames, whose
row index is renumbered by an insert (emails, tasks, customers), so there a delete before rather
than after an insert into the same table scores 0; here only the rows count, so order never does. Malformed calls, unknown tools and bad arguments come back to
the model as tool errors. WorkBench's tables are read from the `workbench_tables` folder (a NeMo
Gym row without one is refused); synthetic tasks bring a seed for tables made in code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from services.common.errors import FailedPrecondition
from services.env.environments.base import Environment, EpisodeState, Score, ToolError, coerce_arguments
from services.env.environments.workbench import analytics, calendar, crm, email, project_management  # noqa: F401
from services.env.environments.workbench.registry import TOOLS
from services.env.environments.workbench.tables import Tables, end_state, load_folder, synthetic
from services.env.environments.workbench.task import WorkbenchTask, from_record


@dataclass
class WorkbenchState(EpisodeState):
    task: WorkbenchTask | None = None
    tables: Tables | None = None
    fresh: Tables | None = None
    """The tables as the episode started (the ground truth is replayed on a copy of them)."""


def replay(tables: Tables, calls: list[dict]) -> Tables:
    """`calls` applied in order to a copy of `tables`; a call that errs changes nothing (as in NeMo Gym)."""
    out = tables.copy()
    for call in calls:
        try:
            TOOLS[call["name"]].fn(out, **coerce_arguments(TOOLS[call["name"]].schema, call["arguments"]))
        except (ToolError, TypeError):
            continue
    return out


class WorkbenchEnvironment(Environment):
    name = "workbench"
    description = "workplace assistant: 27 tools over email, calendar, analytics, project and CRM tables; end-state reward"
    tool_names = tuple(TOOLS)

    def parse(self, record: dict) -> WorkbenchTask:
        return from_record(record)

    def _tables(self, task: WorkbenchTask) -> Tables:
        if task.synthetic_seed is not None:
            return synthetic(task.synthetic_seed)
        folder = self.services.config.workbench_tables
        if folder is None:
            raise FailedPrecondition(
                "this workbench row needs WorkBench's tables: set CASCADE_ENV_WORKBENCH_TABLES to the folder holding "
                "emails.csv, calendar_events.csv, analytics_data.csv, project_tasks.csv, "
                "customer_relationship_manager_data.csv and email_addresses.csv"
            )
        return load_folder(folder)

    def open(self, task: WorkbenchTask) -> WorkbenchState:
        fresh = self._tables(task)
        tools = task.tools if task.tools is not None else [t.schema for t in TOOLS.values()]
        return WorkbenchState(messages=list(task.messages), tools=tools, task=task, tables=fresh.copy(), fresh=fresh)

    def call(self, state: WorkbenchState, name: str, arguments: dict, budget_s: float) -> str:
        spec = TOOLS.get(name)
        if spec is None:
            raise ToolError(f"unknown tool {name!r}")
        try:
            result = spec.fn(state.tables, **coerce_arguments(spec.schema, arguments))
        except TypeError as exc:  # e.g. a parameter the function lacks: the schema and code disagree
            raise ToolError(f"bad arguments for {name}: {exc}") from None
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    def score(self, state: WorkbenchState, final: str | None) -> Score:
        expected = end_state(replay(state.fresh, state.task.ground_truth))
        got = end_state(state.tables)
        differ = [name for name in expected if expected[name] != got[name]]
        if differ:
            return Score(0.0, f"end state differs from the expected one in: {', '.join(differ)}")
        return Score(1.0, "end state matches the expected one")


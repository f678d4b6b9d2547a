"""The workbench's state tables: read from WorkBench's CSV folder or made in code, copied per episode,
and compared at the end the way NeMo Gym's workbench reward compares them.

Tables are lists of rows (dicts of column -> text, None for an empty cell), kept in row order, as
WorkBench's CSVs read with every column as text. `end_state` is what the reward compares: the
emails, calendar events, plots, project tasks and CRM rows (the analytics visits and the company
directory are read-only), every value lower-cased except in the `status`, `list_name` and `board`
columns, whose case matters (NeMo Gym's rule). This module knows nothing about tools' arguments.
"""

from __future__ import annotations

import copy
import csv
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from services.common.errors import FailedPrecondition
from services.common.synth.multiturn.workbench import BOARDS, LISTS, NOW, PRODUCTS, STATUSES, synthetic_tables

__all__ = ["BOARDS", "LISTS", "NOW", "PRODUCTS", "STATUSES", "Tables", "end_state", "load_folder", "synthetic"]
CASE_SENSITIVE = ("status", "list_name", "board")
"""Columns compared with their case; every other value is compared lower-cased."""

FILES = {
    "emails": "emails.csv",
    "events": "calendar_events.csv",
    "visits": "analytics_data.csv",
    "tasks": "project_tasks.csv",
    "customers": "customer_relationship_manager_data.csv",
}
DIRECTORY_FILE = "email_addresses.csv"


@dataclass
class Tables:
    """One episode's tables (a deep copy: a tool call changes only its own episode's)."""

    emails: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    visits: list[dict] = field(default_factory=list)
    plots: list[dict] = field(default_factory=list)
    tasks: list[dict] = field(default_factory=list)
    customers: list[dict] = field(default_factory=list)
    directory: list[str] = field(default_factory=list)

    def copy(self) -> Tables:
        return copy.deepcopy(self)


def end_state(tables: Tables) -> dict[str, list[dict]]:
    """The tables the reward compares, normalised by the case rule (rows keep their order)."""
    def norm(rows: list[dict]) -> list[dict]:
        return [{k: v if v is None or k in CASE_SENSITIVE else str(v).lower() for k, v in row.items()} for row in rows]

    return {"emails": norm(tables.emails), "events": norm(tables.events), "plots": norm(tables.plots),
            "tasks": norm(tables.tasks), "customers": norm(tables.customers)}


def _find(folder: Path, name: str) -> Path:
    for candidate in (folder / name, folder / "processed" / name, folder / "raw" / name):
        if candidate.is_file():
            return candidate
    raise FailedPrecondition(f"workbench_tables: {folder} has no {name} (looked in it, processed/ and raw/)")


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: (v if v != "" else None) for k, v in row.items()} for row in csv.DictReader(f)]


@lru_cache(maxsize=4)
def load_folder(folder: Path) -> Tables:
    """WorkBench's tables from `folder` (read once per folder; callers copy before changing them)."""
    folder = Path(folder)
    parts = {attr: _read_csv(_find(folder, name)) for attr, name in FILES.items()}
    with open(_find(folder, DIRECTORY_FILE), encoding="utf-8") as f:
        directory = [line.strip() for line in f if line.strip()]
    return Tables(directory=directory, **parts)


def synthetic(seed: int) -> Tables:
    """Our own small tables for a seed (`services.common.synth.multiturn.workbench.synthetic_tables`)."""
    return Tables(**synthetic_tables(seed))

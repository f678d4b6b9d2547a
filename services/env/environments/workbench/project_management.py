"""Workbench toolkit: project management (read, search, create, delete, update tasks on boards and lists)."""

from __future__ import annotations

import re

from services.env.environments.base import ToolError
from services.env.environments.workbench.registry import find, need, next_id, tool
from services.env.environments.workbench.tables import BOARDS, LISTS, Tables

TASK_FIELDS = ("task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board")
_EMAIL = re.compile(r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$")
ID = ("string", "The task's 8-digit id")
PROPS = {"task_name": ("string", "Name of the task"),
         "assigned_to_email": ("string", "Email of the person the task is assigned to"),
         "list_name": ("string", f"List of the task, one of: {', '.join(LISTS)}"),
         "due_date": ("string", "Due date, YYYY-MM-DD"),
         "board": ("string", f"Board of the task, one of: {', '.join(BOARDS)}")}


def _check(t: Tables, field: str, value: str) -> None:
    if field == "list_name" and value not in LISTS:
        raise ToolError(f"list_name must be one of {', '.join(LISTS)}, got {value!r}")
    if field == "board" and value not in BOARDS:
        raise ToolError(f"board must be one of {', '.join(BOARDS)}, got {value!r}")
    if field == "assigned_to_email" and value not in {(r["assigned_to_email"] or "").lower() for r in t.tasks}:
        raise ToolError(f"assignee {value!r} is not a team member")


@tool("project_management_get_task_information_by_id", "Returns one field of a task, by the task's id.",
      {"task_id": ID, "field": ("string", f"The field to return, one of: {', '.join(TASK_FIELDS)}")},
      ("task_id", "field"))
def get_task(t: Tables, task_id=None, field=None) -> dict:
    need(task_id=task_id, field=field)
    row = find(t.tasks, "task_id", task_id, "task")
    if field not in row:
        raise ToolError(f"field {field!r} does not exist; fields: {', '.join(TASK_FIELDS)}")
    return {field: row[field]}


@tool("project_management_search_tasks", "Searches tasks: names, lists, due dates and boards by containment, "
      "the assignee exactly; at least one criterion.", PROPS)
def search_tasks(t: Tables, task_name=None, assigned_to_email=None, list_name=None, due_date=None, board=None):
    if not any([task_name, assigned_to_email, list_name, due_date, board]):
        raise ToolError("give at least one of task_name, assigned_to_email, list_name, due_date, board")
    if assigned_to_email and not _EMAIL.match(assigned_to_email):
        raise ToolError(f"assigned_to_email {assigned_to_email!r} is not an email address")
    rows = t.tasks
    for column, value in (("task_name", task_name), ("list_name", list_name), ("due_date", due_date), ("board", board)):
        if value:
            rows = [r for r in rows if value.lower() in (r[column] or "").lower()]
    if assigned_to_email:
        rows = [r for r in rows if (r["assigned_to_email"] or "").lower() == assigned_to_email.lower()]
    return rows


@tool("project_management_create_task", "Creates a task and returns its id.", PROPS, tuple(PROPS), writes=True)
def create_task(t: Tables, task_name=None, assigned_to_email=None, list_name=None, due_date=None, board=None) -> str:
    need(task_name=task_name, assigned_to_email=assigned_to_email, list_name=list_name, due_date=due_date, board=board)
    assigned_to_email = assigned_to_email.lower()
    for field, value in (("assigned_to_email", assigned_to_email), ("list_name", list_name), ("board", board)):
        _check(t, field, value)
    task_id = next_id(t.tasks, "task_id")
    t.tasks.append({"task_id": task_id, "task_name": task_name, "assigned_to_email": assigned_to_email,
                    "list_name": list_name, "due_date": due_date, "board": board})
    return task_id


@tool("project_management_delete_task", "Deletes a task, by its id.", {"task_id": ID}, ("task_id",), writes=True)
def delete_task(t: Tables, task_id=None) -> str:
    need(task_id=task_id)
    t.tasks.remove(find(t.tasks, "task_id", task_id, "task"))
    return "Task deleted successfully."


@tool("project_management_update_task", "Changes one field of a task.",
      {"task_id": ID, "field": ("string", f"The field to change, one of: {', '.join(TASK_FIELDS[1:])}"),
       "new_value": ("string", "The new value")}, ("task_id", "field", "new_value"), writes=True)
def update_task(t: Tables, task_id=None, field=None, new_value=None) -> str:
    need(task_id=task_id, field=field, new_value=new_value)
    if field == "assigned_to_email":
        new_value = new_value.lower()
    _check(t, field, new_value)
    row = find(t.tasks, "task_id", task_id, "task")
    if field not in row:
        raise ToolError(f"field {field!r} does not exist; fields: {', '.join(TASK_FIELDS[1:])}")
    row[field] = new_value
    return "Task updated successfully."

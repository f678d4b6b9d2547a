"""Synthetic workbench tasks and the small tables they run on (WorkBench's columns and id formats).

`synthetic_tables(seed)` makes the tables (the env service builds its episode tables from it);
`make_tasks` draws tasks that take a lookup then one change — email a colleague (directory, then
send), delete an event, move a task to a list, set a customer's status (search, then update) — or
one change (a plot). Ground truth is NeMo Gym's form: calls with JSON-text arguments. `tool_names`: the
tools offered (the directory lookup, the task's own search and the tools of the answer).
`make_demonstrations` draws tasks with the turns that solve them (the lookup, the change, a short
confirmation) for SFT; the tool results between the turns are the environment's to give (the env
service plays them, services/env/demonstrations.py), never written here.
"""

from __future__ import annotations

import json
import random

from services.common.toolcalls import format_tool_calls

NOW = "2023-11-30 23:59:00"
SYSTEM = ("Today's date is Thursday, 2023-11-30 and the current time is 23:59:00. Use the tools to do what the "
          "user asks, then reply with a short confirmation and no tool call.")
PEOPLE = ["ana", "ben", "carla", "dev", "elif", "finn", "gita", "hugo", "ines", "jon"]
SURNAMES = ["lopez", "okafor", "berg", "rao", "demir", "walsh", "iyer", "moreau", "silva", "kim"]
DOMAIN = "northwind.com"
EVENT_NAMES = ["sync up", "design review", "budget talk", "standup", "demo day", "retro", "planning", "one on one"]
TASK_NAMES = ["fix login bug", "add dark mode", "write api docs", "draw new logo", "speed up search",
              "clean old tables", "add export button", "test payment flow"]
LISTS = ["Backlog", "In Progress", "In Review", "Completed"]
BOARDS = ["Back end", "Front end", "Design"]
STATUSES = ["Qualified", "Won", "Lost", "Lead", "Proposal"]
PRODUCTS = ["Software", "Hardware", "Services", "Consulting", "Training"]
CLIENTS = ["acme", "globex", "initech", "umbra", "vortex", "zenith", "helix", "orbit"]
SOURCES = ["direct", "referral", "search engine", "social media"]
SUBJECTS = ["lunch", "report", "budget", "launch", "offsite", "review"]
BODIES = ["see you at noon", "the report is ready", "please check the numbers", "we ship on friday"]


LOOKUP = "company_directory_find_email_address"
"""Offered with every task beside its search and the tools of its answer (all 27 schemas would outgrow a
tiny model's context)."""
DONE = {"workbench_email": "The email is sent.", "workbench_calendar": "The meeting is cancelled.",
        "workbench_project_management": "The task is moved.", "workbench_customer_relationship_manager":
        "The customer's status is updated.", "workbench_analytics": "The plot is made."}
"""The closing reply of a demonstration, per category (a turn without a tool call ends the episode)."""
SPLIT_BASE = {"train": 0, "validation": 1_000_000, "sft": 2_000_000}
"""Table seeds of a split are drawn in [base, base + 1e6): train, validation and SFT tables never meet."""


def person_email(i: int) -> str:
    return f"{PEOPLE[i]}.{SURNAMES[i]}@{DOMAIN}"


def synthetic_tables(seed: int) -> dict[str, list]:
    """Tables for a seed: 10 people, 8 emails, 8 events, 30 visits, 8 tasks, 8 customers (text cells, None = empty)."""
    rng = random.Random(f"cascade-workbench:{seed}")
    n = len(PEOPLE)
    emails = [{"email_id": f"{i + 1:08d}", "inbox/outbox": rng.choice(["inbox", "outbox"]),
               "sender/recipient": person_email(p := rng.randrange(n)), "subject": f"Update on {(topic := rng.choice(TASK_NAMES))}",
               "sent_datetime": f"2023-11-{10 + i:02d} 09:{rng.randint(10, 59)}:00",
               "body": f"Hi,\n\nA short note about {topic}.\n\nBest,\n{PEOPLE[p].title()}"} for i in range(8)]
    events = [{"event_id": f"{i + 1:08d}", "event_name": name, "participant_email": person_email(rng.randrange(n)),
               "event_start": f"2023-12-{1 + i:02d} {rng.choice([9, 10, 11, 14, 15]):02d}:00:00",
               "duration": str(rng.choice([30, 60, 90]))} for i, name in enumerate(rng.sample(EVENT_NAMES, 8))]
    tasks = [{"task_id": f"{i + 1:08d}", "task_name": name, "assigned_to_email": person_email(rng.randrange(n)),
              "list_name": rng.choice(LISTS), "due_date": f"2023-12-{rng.randint(1, 28):02d}", "board": rng.choice(BOARDS)}
             for i, name in enumerate(rng.sample(TASK_NAMES, 8))]
    customers = []
    for i, client in enumerate(rng.sample(CLIENTS, 8)):
        first = rng.choice(PEOPLE).title()
        customers.append({"customer_id": f"{i + 1:08d}", "assigned_to_email": person_email(rng.randrange(n)),
                          "customer_name": f"{first} {client.title()}", "customer_email": f"{first.lower()}@{client}.com",
                          "customer_phone": None, "last_contact_date": f"2023-11-{rng.randint(1, 29):02d} 23:59:00",
                          "product_interest": rng.choice(PRODUCTS), "status": rng.choice(STATUSES),
                          "follow_up_by": f"2023-12-{rng.randint(1, 28):02d} 23:59:00", "notes": None})
    visits = [{"date_of_visit": f"2023-11-{rng.randint(20, 29):02d}", "visitor_id": f"{rng.randint(0, 9999):04d}",
               "page_views": str(rng.randint(1, 9)), "session_duration_seconds": str(rng.randint(1, 30)),
               "traffic_source": rng.choice(SOURCES), "user_engaged": str(rng.random() < 0.5)} for _ in range(30)]
    return {"emails": emails, "events": events, "visits": visits, "plots": [], "tasks": tasks,
            "customers": customers, "directory": [person_email(i) for i in range(n)]}


def _call(tool: str, **arguments) -> dict:
    return {"name": tool, "arguments": json.dumps(arguments)}


def _draw(rng: random.Random, tables: dict) -> tuple[str, dict | None, list[dict], str]:
    """(prompt, the lookup that finds what the change needs or None, the ground-truth calls, category)."""
    kind = rng.choice(["email", "event", "task", "customer", "plot"])
    if kind == "email":
        i, subject, body = rng.randrange(len(PEOPLE)), rng.choice(SUBJECTS), rng.choice(BODIES)
        return (f"Send {PEOPLE[i].title()} an email with the subject '{subject}' and the body '{body}'.",
                _call(LOOKUP, name=PEOPLE[i].title()),
                [_call("email_send_email", recipient=person_email(i), subject=subject, body=body)], "workbench_email")
    if kind == "event":
        ev = rng.choice(tables["events"])
        return (f"Cancel the '{ev['event_name']}' meeting.", _call("calendar_search_events", query=ev["event_name"]),
                [_call("calendar_delete_event", event_id=ev["event_id"])], "workbench_calendar")
    if kind == "task":
        task = rng.choice(tables["tasks"])
        target = rng.choice([x for x in LISTS if x != task["list_name"]])
        return (f"Move the task '{task['task_name']}' to {target}.",
                _call("project_management_search_tasks", task_name=task["task_name"]),
                [_call("project_management_update_task", task_id=task["task_id"], field="list_name", new_value=target)],
                "workbench_project_management")
    if kind == "customer":
        c = rng.choice(tables["customers"])
        target = rng.choice([x for x in STATUSES if x != c["status"]])
        return (f"Set the status of the customer {c['customer_name']} to {target}.",
                _call("customer_relationship_manager_search_customers", customer_name=c["customer_name"]),
                [_call("customer_relationship_manager_update_customer", customer_id=c["customer_id"], field="status",
                       new_value=target)], "workbench_customer_relationship_manager")
    day = rng.randint(20, 27)
    value, plot = rng.choice(["total_visits", "user_engaged", "session_duration_seconds"]), rng.choice(["bar", "line"])
    return (f"Make a {plot} plot of {value} from 2023-11-{day} to 2023-11-{day + 2}.", None,
            [_call("analytics_create_plot", time_min=f"2023-11-{day}", time_max=f"2023-11-{day + 2}",
                   value_to_plot=value, plot_type=plot)], "workbench_analytics")


def _drawn(rng: random.Random, n: int, split: str) -> list[tuple[dict, dict | None]]:
    """`n` (task record, its lookup call) pairs, each task on tables of its own seed."""
    if split not in SPLIT_BASE:
        raise ValueError(f"split must be one of {list(SPLIT_BASE)}, got {split!r}")
    out = []
    for k in range(n):
        seed = SPLIT_BASE[split] + rng.randrange(1_000_000)
        prompt, lookup, truth, category = _draw(rng, synthetic_tables(seed))
        names = [LOOKUP] + ([lookup["name"]] if lookup else []) + [c["name"] for c in truth]
        out.append(({"id": f"workbench-{split}-{k}", "environment": "workbench", "category": category,
                     "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                     "tables": {"synthetic": seed}, "ground_truth": truth,
                     "tool_names": list(dict.fromkeys(names))}, lookup))
    return out


def make_tasks(rng: random.Random, n: int, split: str) -> list[dict]:
    """`n` workbench tasks, each on tables of its own seed (train, validation and SFT seeds never meet)."""
    return [task for task, _lookup in _drawn(rng, n, split)]


def _decoded(call: dict) -> dict:
    return {"name": call["name"], "arguments": json.loads(call["arguments"])}


def make_demonstrations(rng: random.Random, n: int) -> list[dict]:
    """`n` SFT tasks (tables of the `sft` seeds) with the assistant turns that solve them:
    {"task": record, "turns": [text, ...]} — the lookup call (when the task needs one), the
    ground-truth calls, then the confirmation without a tool call. The calls are written in the
    chat template's format (services.common.toolcalls); the tool results come from the environment."""
    out = []
    for task, lookup in _drawn(rng, n, "sft"):
        calls = [[_decoded(lookup)]] if lookup else []
        calls.append([_decoded(c) for c in task["ground_truth"]])
        turns = [format_tool_calls(c) for c in calls] + [DONE[task["category"]]]
        out.append({"task": task, "turns": turns})
    return out

"""Synthetic workbench tasks and the small tables they run on (WorkBench's columns and id formats).

`synthetic_tables(seed)` makes the tables (the env service builds its episode tables from it);
`make_tasks` draws tasks that take a lookup then one change — email a colleague (directory, then
send), delete an event, move a task to a list, set a customer's status (search, then update) — or
one change (a plot). Ground truth is NeMo Gym's form: calls with JSON-text arguments. `tool_names`: the
tools offered (the directory lookup and those of the answer).
"""

from __future__ import annotations

import json
import random

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
"""Offered with every task beside the tools of its answer (all 27 schemas would outgrow a tiny model's context)."""


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


def _call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": json.dumps(arguments)}


def _draw(rng: random.Random, tables: dict) -> tuple[str, list[dict], str]:
    kind = rng.choice(["email", "event", "task", "customer", "plot"])
    if kind == "email":
        i, subject, body = rng.randrange(len(PEOPLE)), rng.choice(SUBJECTS), rng.choice(BODIES)
        return (f"Send {PEOPLE[i].title()} an email with the subject '{subject}' and the body '{body}'.",
                [_call("email_send_email", recipient=person_email(i), subject=subject, body=body)], "workbench_email")
    if kind == "event":
        ev = rng.choice(tables["events"])
        return (f"Cancel the '{ev['event_name']}' meeting.", [_call("calendar_delete_event", event_id=ev["event_id"])],
                "workbench_calendar")
    if kind == "task":
        task = rng.choice(tables["tasks"])
        target = rng.choice([x for x in LISTS if x != task["list_name"]])
        return (f"Move the task '{task['task_name']}' to {target}.",
                [_call("project_management_update_task", task_id=task["task_id"], field="list_name", new_value=target)],
                "workbench_project_management")
    if kind == "customer":
        c = rng.choice(tables["customers"])
        target = rng.choice([x for x in STATUSES if x != c["status"]])
        return (f"Set the status of the customer {c['customer_name']} to {target}.",
                [_call("customer_relationship_manager_update_customer", customer_id=c["customer_id"], field="status",
                       new_value=target)], "workbench_customer_relationship_manager")
    day = rng.randint(20, 27)
    value, plot = rng.choice(["total_visits", "user_engaged", "session_duration_seconds"]), rng.choice(["bar", "line"])
    return (f"Make a {plot} plot of {value} from 2023-11-{day} to 2023-11-{day + 2}.",
            [_call("analytics_create_plot", time_min=f"2023-11-{day}", time_max=f"2023-11-{day + 2}",
                   value_to_plot=value, plot_type=plot)], "workbench_analytics")


def make_tasks(rng: random.Random, n: int, split: str) -> list[dict]:
    """`n` workbench tasks, each on tables of its own seed (train and validation seeds never meet)."""
    base = 0 if split == "train" else 1_000_000
    out = []
    for k in range(n):
        seed = base + rng.randrange(1_000_000)
        prompt, truth, category = _draw(rng, synthetic_tables(seed))
        out.append({"id": f"workbench-{split}-{k}", "environment": "workbench", "category": category,
                    "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                    "tables": {"synthetic": seed}, "ground_truth": truth,
                    "tool_names": list(dict.fromkeys([LOOKUP] + [c["name"] for c in truth]))})
    return out

"""One EnvCore (with its sandbox) shared by the env tests of a session; a folder of WorkBench-format tables."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

BASE_UID = 63000


@pytest.fixture(scope="session")
def env_core(workbench_folder):
    from services.env.config import EnvConfig
    from services.env.core import EnvCore

    core = EnvCore(EnvConfig(sandbox_base_uid=BASE_UID, sandbox_workers=2, tool_timeout_s=3.0, tool_output_chars=600,
                             reap_interval_s=0.2, default_turns=6, max_env_seconds=60,
                             workbench_tables=workbench_folder))
    yield core
    core.close_all()


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


@pytest.fixture(scope="session")
def workbench_folder(tmp_path_factory) -> Path:
    """WorkBench's table files (processed/ and raw/ as it ships them), holding the ids the shared NeMo Gym
    sample rows touch, with a few rows around them."""
    root = tmp_path_factory.mktemp("workbench-tables")
    (root / "processed").mkdir()
    (root / "raw").mkdir()
    write_csv(root / "processed" / "emails.csv", [
        {"email_id": "00000056", "inbox/outbox": "inbox", "sender/recipient": "nadia.moreau@atlas.com",
         "subject": "Budget", "sent_datetime": "2023-11-20 10:00:00", "body": "Numbers attached."},
        {"email_id": "00000057", "inbox/outbox": "inbox", "sender/recipient": "carlos.rodriguez@atlas.com",
         "subject": "Task Update on Develop prototype for report generation", "sent_datetime": "2023-11-28 09:15:00",
         "body": "Sam,\n\nDone ahead of schedule.\n\nBest,\nCarlos"},
    ])
    write_csv(root / "processed" / "calendar_events.csv", [
        {"event_id": "00000251", "event_name": "sync up", "participant_email": "luis.ortiz@atlas.com",
         "event_start": "2023-12-01 09:00:00", "duration": "30"},
        {"event_id": "00000252", "event_name": "process review", "participant_email": "fatima.khan@atlas.com",
         "event_start": "2023-12-01 15:00:00", "duration": "60"},
    ])
    write_csv(root / "processed" / "analytics_data.csv", [
        {"date_of_visit": "2023-11-22", "visitor_id": "0860", "page_views": "8", "session_duration_seconds": "4",
         "traffic_source": "referral", "user_engaged": "False"},
        {"date_of_visit": "2023-11-22", "visitor_id": "4426", "page_views": "3", "session_duration_seconds": "12",
         "traffic_source": "direct", "user_engaged": "True"},
    ])
    write_csv(root / "processed" / "project_tasks.csv", [
        {"task_id": "00000149", "task_name": "Add animation to carousel", "assigned_to_email": "leila.azizi@atlas.com",
         "list_name": "Backlog", "due_date": "2023-11-27", "board": "Front end"},
    ])
    customers = []
    for cid, owner, interest in (("00000035", "akira.sato@atlas.com", "Software"),
                                 ("00000080", "akira.sato@atlas.com", "Software"),
                                 ("00000095", "akira.sato@atlas.com", "Software"),
                                 ("00000101", "akira.sato@atlas.com", "Hardware")):
        customers.append({"customer_id": cid, "assigned_to_email": owner, "customer_name": f"Client {cid}",
                          "customer_email": f"c{cid}@client.com", "customer_phone": "", "last_contact_date":
                          "2023-11-30 23:59:00", "product_interest": interest, "status": "Lead",
                          "follow_up_by": "2023-12-14 23:59:00", "notes": ""})
    write_csv(root / "processed" / "customer_relationship_manager_data.csv", customers)
    (root / "raw" / "email_addresses.csv").write_text(
        "carlos.rodriguez@atlas.com\nraj.patel@atlas.com\nakira.sato@atlas.com\nfatima.khan@atlas.com\n")
    return root

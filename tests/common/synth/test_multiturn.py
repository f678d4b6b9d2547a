"""Synthetic multi-turn tasks: the same bytes for a seed, every environment's shape, train and
validation apart (their solvability through the env service is tested in tests/env/)."""

from __future__ import annotations

import json
import random

from services.common.synth.multiturn import REGISTRY, write_env_dataset
from services.common.synth.multiturn.workbench import synthetic_tables


def test_same_seed_same_bytes_and_every_environment(tmp_path):
    a, b = write_env_dataset(tmp_path / "a", seed=3, n_train=6, n_val=3), write_env_dataset(tmp_path / "b", seed=3, n_train=6, n_val=3)
    assert sorted(a) == sorted(REGISTRY) == ["python", "swe", "workbench"]
    for name in a:
        for split, n in (("train", 6), ("validation", 3)):
            text = (a[name] / f"{split}.jsonl").read_text()
            assert text == (b[name] / f"{split}.jsonl").read_text()
            rows = [json.loads(line) for line in text.splitlines()]
            assert len(rows) == n and all(r["environment"] == name and r["messages"] for r in rows)


def test_workbench_train_and_validation_never_share_tables():
    train = REGISTRY["workbench"].make_tasks(random.Random(0), 40, "train")
    val = REGISTRY["workbench"].make_tasks(random.Random(0), 40, "validation")
    assert not {t["tables"]["synthetic"] for t in train} & {t["tables"]["synthetic"] for t in val}
    assert {t["category"] for t in train} == {"workbench_email", "workbench_calendar", "workbench_project_management",
                                              "workbench_customer_relationship_manager", "workbench_analytics"}


def test_synthetic_tables_are_deterministic_and_in_workbench_formats():
    t = synthetic_tables(11)
    assert t == synthetic_tables(11) and t != synthetic_tables(12)
    assert all(len(r["event_id"]) == 8 and r["event_start"][11:13].isdigit() for r in t["events"])
    assert len(t["directory"]) == 10 and t["plots"] == []


def test_write_env_dataset_writes_only_the_named_environments_and_refuses_unknown_ones(tmp_path):
    import pytest

    from services.common.errors import InvalidArgument

    assert sorted(write_env_dataset(tmp_path, seed=1, n_train=2, n_val=1, envs=["workbench"])) == ["workbench"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["workbench"]
    with pytest.raises(InvalidArgument, match=r"envs: unknown environment\(s\) \['chess'\]"):
        write_env_dataset(tmp_path, envs=["chess"])


def test_workbench_tasks_offer_the_search_their_change_needs():
    tasks = REGISTRY["workbench"].make_tasks(random.Random(4), 60, "train")
    search = {"workbench_calendar": "calendar_search_events", "workbench_project_management": "project_management_search_tasks",
              "workbench_customer_relationship_manager": "customer_relationship_manager_search_customers"}
    for t in tasks:
        assert t["tool_names"][0] == "company_directory_find_email_address"
        assert [c["name"] for c in t["ground_truth"]][-1] == t["tool_names"][-1]
        if t["category"] in search:
            assert t["tool_names"][1] == search[t["category"]]


def test_workbench_demonstrations_lookup_then_change_then_a_reply_without_a_call():
    from services.common.synth.multiturn.workbench import make_demonstrations
    from services.common.toolcalls import parse_tool_calls

    demos = make_demonstrations(random.Random(2), 40)
    val = REGISTRY["workbench"].make_tasks(random.Random(2), 40, "validation")
    assert not {d["task"]["tables"]["synthetic"] for d in demos} & {t["tables"]["synthetic"] for t in val}
    assert make_demonstrations(random.Random(2), 40) == demos
    for d in demos:
        task, turns = d["task"], d["turns"]
        calls = [parse_tool_calls(t) for t in turns]
        assert calls[-1] == [] and all(len(c) == 1 for c in calls[:-1]), turns
        assert all(c[0]["name"] in task["tool_names"] for c in calls[:-1])
        truth = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in task["ground_truth"]]
        assert calls[-2] == truth, "the change is the ground truth, read back from the call format"
        assert len(turns) == (2 if task["category"] == "workbench_analytics" else 3)

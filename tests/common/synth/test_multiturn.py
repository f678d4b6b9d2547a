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

"""The step ledger on a real PostgreSQL: exactly-once under concurrency, resume, evals, teacher choice.

Each test module run gets its own database (created here, dropped afterwards), so runs never see
each other's rows.
"""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from services.orchestrator.ledger import Ledger, ResumePoint
from services.orchestrator.selection import TeacherPick, select_teachers

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture(scope="module")
def pg_database(postgres_url):
    """A fresh database on the real server; its SQLAlchemy URL."""
    name = f"cascade_test_{uuid.uuid4().hex[:12]}"
    admin = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = postgres_url.rpartition("/")
    yield f"{base}/{name}"
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def ledger(pg_database):
    led = Ledger(pg_database)
    yield led
    led.close()


@pytest.fixture
def run(ledger):
    run_id = ledger.create_run("pg", {"stages": ["grpo", "mopd"]})
    ledger.begin_stage(run_id, 0, "rl", "grpo", steps=2, start_weight_version=0)
    return run_id


def _race(n: int, fn) -> list:
    barrier = threading.Barrier(n)
    out: list = []

    def worker(i: int) -> None:
        barrier.wait()
        out.append(fn(i))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_tables_live_in_postgres(ledger):
    assert ledger.engine.dialect.name == "postgresql"


def test_two_threads_advancing_the_same_step_exactly_one_wins(ledger, run):
    sid = ledger.begin_step(run, 0, 0).step_id
    for phase in ("generated", "scored", "trained"):
        results = _race(2, lambda i, p=phase: ledger.advance(sid, p, metrics={f"{p}_by": i}))
        assert sorted(results) == [False, True], phase
    rec = ledger.step(sid)
    assert rec.phase == "trained" and set(rec.metrics) == {"generated_by", "scored_by", "trained_by"}


def test_many_workers_beginning_the_same_step_share_one_row(ledger, run):
    records = _race(6, lambda i: ledger.begin_step(run, 0, 1))
    assert len({r.step_id for r in records}) == 1
    assert sorted(r.attempts for r in records) == [1, 2, 3, 4, 5, 6]
    assert len(ledger.steps(run, stage=0)) == 1


def test_advance_refuses_going_back(ledger, run):
    sid = ledger.begin_step(run, 0, 0).step_id
    assert ledger.advance(sid, "published", weight_version=1, seconds=0.5)
    assert not ledger.advance(sid, "trained")
    assert ledger.step(sid).phase == "published" and ledger.step(sid).timings == {"published": 0.5}


def test_resume_point_and_cancel(ledger, run):
    ledger.advance(ledger.begin_step(run, 0, 0).step_id, "done", weight_version=1)
    ledger.advance(ledger.begin_step(run, 0, 1).step_id, "trained")
    assert ledger.resume_point(run) == ResumePoint(0, 1, "trained", 1)
    ledger.request_cancel(run)
    assert ledger.cancel_requested(run)


def test_teacher_selection_over_postgres(ledger, run):
    ledger.record_eval(run, 0, 0, 1, "ckpt/v1", "if", 0.5, 8)
    ledger.record_eval(run, 0, 1, 2, "ckpt/v2", "if", 0.5, 8)
    ledger.record_eval(run, 0, 1, 2, "ckpt/v2", "mcqa", 0.75, 8)
    assert select_teachers(ledger, run, ["if", "mcqa"]) == {
        "if": TeacherPick("ckpt/v1", 0.5, 0, 0), "mcqa": TeacherPick("ckpt/v2", 0.75, 0, 1)}


def test_per_prompt_scores_over_postgres(ledger, run):
    """The per-prompt scores table (JSON) behind the claims' intervals, on PostgreSQL too."""
    assert ledger.record_eval(run, 0, -1, 0, "ckpt/v0", "if", 0.25, 4, per_prompt={"t1": 0.5, "t2": 0.0})
    assert not ledger.record_eval(run, 0, -1, 0, "ckpt/v0", "if", 0.25, 4, per_prompt={"t1": 1.0})
    ledger.record_fresh_eval(run, 1, "student", "if", "ckpt/v3", 0.75, 4, per_prompt={"t1": 1.0, "t2": 0.5})
    assert ledger.prompt_scores(run) == {("eval", 0, -1, "if"): {"t1": 0.5, "t2": 0.0},
                                         ("student", 1, 0, "if"): {"t1": 1.0, "t2": 0.5}}

"""The ledger's tables and engine: runs, stages, steps with their phase, evals (with their per-prompt
scores), teacher choices and weight versions as SQLAlchemy models, and the engine (SQLite in WAL mode, or PostgreSQL by URL).

`services.orchestrator.ledger` is the typed access to them; this module only declares them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
    create_engine,
    event,
    make_url,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

PHASES = ("drawn", "generated", "scored", "trained", "published", "synced", "done")
RUN_STATUSES = ("pending", "running", "succeeded", "failed", "cancelled")
STAGE_STATUSES = ("pending", "running", "succeeded", "failed", "cancelled")


def utc_now() -> datetime:
    return datetime.now(UTC)


def step_id_for(run_id: int, stage: int, step: int) -> str:
    """The idempotency key of a step, also sent to the trainer (trainer.proto TrainStepRequest.step_id)."""
    return f"run-{run_id}/stage-{stage}/step-{step}"


class Base(DeclarativeBase):
    type_annotation_map: ClassVar = {dict[str, Any]: JSON, datetime: DateTime(timezone=True)}


class Run(Base):
    __tablename__ = "cascade_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    config: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(16), default="pending")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(String(2000), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(default=utc_now)


class Stage(Base):
    __tablename__ = "cascade_stages"
    __table_args__ = (UniqueConstraint("run_id", "index"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("cascade_runs.id", ondelete="CASCADE"))
    index: Mapped[int]
    name: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(16))
    steps: Mapped[int]
    status: Mapped[str] = mapped_column(String(16), default="pending")
    start_weight_version: Mapped[int | None]


class Step(Base):
    __tablename__ = "cascade_steps"
    __table_args__ = (UniqueConstraint("run_id", "stage_index", "step_index"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("cascade_runs.id", ondelete="CASCADE"))
    stage_index: Mapped[int]
    step_index: Mapped[int]
    step_id: Mapped[str] = mapped_column(String(128), unique=True)
    phase: Mapped[str] = mapped_column(String(16))
    phase_rank: Mapped[int]
    weight_version: Mapped[int | None]
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    timings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    attempts: Mapped[int] = mapped_column(default=1)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(default=utc_now)


class Eval(Base):
    __tablename__ = "cascade_evals"
    __table_args__ = (UniqueConstraint("run_id", "stage_index", "step_index", "domain"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("cascade_runs.id", ondelete="CASCADE"))
    stage_index: Mapped[int]
    step_index: Mapped[int]
    weight_version: Mapped[int]
    checkpoint: Mapped[str] = mapped_column(String(512))
    domain: Mapped[str] = mapped_column(String(64))
    score: Mapped[float] = mapped_column(Float)
    n: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class TeacherChoice(Base):
    __tablename__ = "cascade_teacher_choices"
    __table_args__ = (UniqueConstraint("run_id", "stage_index", "domain"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("cascade_runs.id", ondelete="CASCADE"))
    stage_index: Mapped[int]
    domain: Mapped[str] = mapped_column(String(64))
    checkpoint: Mapped[str] = mapped_column(String(512))
    score: Mapped[float] = mapped_column(Float)


class FreshEval(Base):
    """An MOPD stage's teachers (when it starts) and its student (when it ends) evaluated once more,
    all with one seed of their own: the scores that chose the teachers are each the best of several
    noisy ones, which overstates them (the winner's curse); these fresh draws do not, and the
    student is drawn with the same random numbers as its teachers, so the two compare pairwise."""

    __tablename__ = "cascade_fresh_evals"
    __table_args__ = (UniqueConstraint("run_id", "stage_index", "role", "domain"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("cascade_runs.id", ondelete="CASCADE"))
    stage_index: Mapped[int]
    role: Mapped[str] = mapped_column(String(16))
    """`teacher` or `student`."""
    domain: Mapped[str] = mapped_column(String(64))
    checkpoint: Mapped[str] = mapped_column(String(512))
    score: Mapped[float] = mapped_column(Float)
    n: Mapped[int]


class PromptScores(Base):
    """The per-prompt scores (avg@k over the prompt's samples that did not error, by task id) behind one
    evaluation (`source` `eval`, at its stage and step) or one fresh draw (`teacher` / `student`, step
    0): what the claims' paired intervals resample. A table of its own, so that `create_all` adds it
    to a ledger written before it existed (their evaluations simply have no per-prompt scores)."""

    __tablename__ = "cascade_prompt_scores"
    __table_args__ = (UniqueConstraint("run_id", "source", "stage_index", "step_index", "domain"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("cascade_runs.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(16))
    """`eval`, `teacher` or `student`."""
    stage_index: Mapped[int]
    step_index: Mapped[int]
    domain: Mapped[str] = mapped_column(String(64))
    scores: Mapped[dict[str, Any]]
    """{task id: score}."""


class WeightVersion(Base):
    __tablename__ = "cascade_weight_versions"
    __table_args__ = (UniqueConstraint("run_id", "version"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("cascade_runs.id", ondelete="CASCADE"))
    version: Mapped[int]
    uri: Mapped[str] = mapped_column(String(1024))
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


def build_engine(url: str):
    """An engine for `url`; SQLite gets WAL, a busy timeout and foreign keys on every connection."""
    if url.startswith("sqlite"):
        path = make_url(url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)

"""The step ledger: runs, stages, steps with their phase, evals (and their per-prompt scores), teacher
choices and weight versions.

The ledger is what makes a step happen exactly once (DESIGN.md section 6): `begin_step` returns the
existing row when a task is redelivered, `advance` moves a step's phase forward only and atomically
(a conditional UPDATE, so of two concurrent callers exactly one wins, on SQLite and PostgreSQL
alike), and `resume_point` tells a restarted runner where to continue. SQLite (WAL mode) by default,
PostgreSQL by URL (the tables and engine: `ledger_tables`). This module knows nothing about
Celery, gRPC or how a phase's work is done.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound
from services.orchestrator.ledger_tables import (  # noqa: F401  (re-exported: the ledger's public names)
    PHASES,
    RUN_STATUSES,
    STAGE_STATUSES,
    Base,
    Eval,
    FreshEval,
    PromptScores,
    Run,
    Stage,
    Step,
    TeacherChoice,
    WeightVersion,
    build_engine,
    step_id_for,
    utc_now,
)


@dataclass(frozen=True)
class StepRecord:
    run_id: int
    stage_index: int
    step_index: int
    step_id: str
    phase: str
    weight_version: int | None
    metrics: dict[str, Any]
    timings: dict[str, Any]
    attempts: int

    def reached(self, phase: str) -> bool:
        """True when this step is at `phase` or past it."""
        return PHASES.index(self.phase) >= _rank(phase)


@dataclass(frozen=True)
class ResumePoint:
    """Where a restarted runner continues: `phase` is what step (stage_index, step_index) has reached
    (None = not begun); step_index == the stage's step count means only the stage's end remains."""

    stage_index: int
    step_index: int
    phase: str | None
    weight_version: int | None
    finished: bool = False


@dataclass(frozen=True)
class EvalRecord:
    stage_index: int
    step_index: int
    weight_version: int
    checkpoint: str
    domain: str
    score: float
    n: int


@dataclass(frozen=True)
class StageRecord:
    index: int
    name: str
    type: str
    steps: int
    status: str
    start_weight_version: int | None


@dataclass(frozen=True)
class RunRecord:
    id: int
    name: str
    config: dict[str, Any]
    status: str
    cancel_requested: bool
    created_at: datetime
    updated_at: datetime
    stages: list[StageRecord] = field(default_factory=list)
    error: str | None = None


def _rank(phase: str) -> int:
    if phase not in PHASES:
        raise InvalidArgument("phase", f"unknown phase {phase!r}; use one of {', '.join(PHASES)}")
    return PHASES.index(phase)


def _step_record(row: Step) -> StepRecord:
    return StepRecord(row.run_id, row.stage_index, row.step_index, row.step_id, row.phase, row.weight_version,
                      dict(row.metrics or {}), dict(row.timings or {}), row.attempts)


def _stage_record(row: Stage) -> StageRecord:
    return StageRecord(row.index, row.name, row.type, row.steps, row.status, row.start_weight_version)


class Ledger:
    """Typed access to the ledger tables; every method is one short transaction."""

    def __init__(self, url: str):
        self.url = url
        self.engine = build_engine(url)
        Base.metadata.create_all(self.engine)
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    def _tx(self) -> Session:
        return self._session.begin()

    # ---------------------------------------------------------------------------------- runs
    def create_run(self, name: str, config: dict[str, Any]) -> int:
        with self._tx() as s:
            run = Run(name=name, config=config)
            s.add(run)
            s.flush()
            return run.id

    def _run(self, s: Session, run_id: int) -> Run:
        # ids are positive 64-bit integers; a larger one would overflow the driver (SQLite), not miss
        run = s.get(Run, run_id) if 0 < run_id < 2**63 else None
        if run is None:
            raise NotFound(f"run {run_id} is not in the ledger")
        return run

    def run(self, run_id: int) -> RunRecord:
        with self._tx() as s:
            r = self._run(s, run_id)
            stages = s.scalars(select(Stage).where(Stage.run_id == run_id).order_by(Stage.index)).all()
            return RunRecord(r.id, r.name, dict(r.config), r.status, r.cancel_requested, r.created_at, r.updated_at,
                             [_stage_record(x) for x in stages], r.error)

    def runs(self) -> list[RunRecord]:
        with self._tx() as s:
            ids = s.scalars(select(Run.id).order_by(Run.id)).all()
        return [self.run(i) for i in ids]

    def set_run_status(self, run_id: int, status: str, error: str | None = None) -> None:
        """Set the run's status; `error` (one line, why it failed) is kept with it."""
        if status not in RUN_STATUSES:
            raise InvalidArgument("status", f"unknown run status {status!r}; use one of {', '.join(RUN_STATUSES)}")
        with self._tx() as s:
            run = self._run(s, run_id)
            run.status, run.updated_at = status, utc_now()
            if error is not None:
                run.error = error[:2000]

    def request_cancel(self, run_id: int) -> None:
        """Ask the runner to stop cleanly after the phase in progress."""
        with self._tx() as s:
            run = self._run(s, run_id)
            run.cancel_requested, run.updated_at = True, utc_now()

    def cancel_requested(self, run_id: int) -> bool:
        with self._tx() as s:
            return self._run(s, run_id).cancel_requested

    # -------------------------------------------------------------------------------- stages
    def begin_stage(self, run_id: int, index: int, name: str, type: str, steps: int,
                    start_weight_version: int | None = None) -> StageRecord:
        """Record that stage `index` runs (idempotent: a second call returns the existing row)."""
        with self._tx() as s:
            self._run(s, run_id)
            row = s.scalars(select(Stage).where(Stage.run_id == run_id, Stage.index == index)).first()
            if row is None:
                row = Stage(run_id=run_id, index=index, name=name, type=type, steps=steps,
                            start_weight_version=start_weight_version, status="running")
                s.add(row)
            elif row.name != name or row.type != type:
                raise FailedPrecondition(f"run {run_id} stage {index} is {row.name!r} ({row.type}), not {name!r} ({type})")
            elif row.status == "pending":
                row.status = "running"
            return _stage_record(row)

    def set_stage_status(self, run_id: int, index: int, status: str) -> None:
        if status not in STAGE_STATUSES:
            raise InvalidArgument("status", f"unknown stage status {status!r}; use one of {', '.join(STAGE_STATUSES)}")
        with self._tx() as s:
            row = s.scalars(select(Stage).where(Stage.run_id == run_id, Stage.index == index)).first()
            if row is None:
                raise NotFound(f"run {run_id} has no stage {index}")
            row.status = status

    # --------------------------------------------------------------------------------- steps
    def begin_step(self, run_id: int, stage: int, step: int) -> StepRecord:
        """The step's row, created at phase `drawn`; a redelivered task gets the existing row (attempts + 1)."""
        sid = step_id_for(run_id, stage, step)
        for _ in range(3):
            try:
                with self._tx() as s:
                    # Write first: the UPDATE takes the row (PostgreSQL) or database (SQLite) lock.
                    bumped = s.execute(update(Step).where(Step.step_id == sid)
                                       .values(attempts=Step.attempts + 1, updated_at=utc_now())
                                       .execution_options(synchronize_session=False))
                    if bumped.rowcount == 0:
                        self._run(s, run_id)
                        s.add(Step(run_id=run_id, stage_index=stage, step_index=step, step_id=sid, phase=PHASES[0],
                                   phase_rank=0, metrics={}, timings={}, attempts=1))
                        s.flush()
                    return _step_record(s.scalars(select(Step).where(Step.step_id == sid)).one())
            except IntegrityError:
                continue  # another worker inserted it between our UPDATE and INSERT: take the UPDATE path
        raise FailedPrecondition(f"step {sid}: could not create or fetch its ledger row")

    def advance(self, step_id: str, phase: str, *, weight_version: int | None = None,
                metrics: dict[str, Any] | None = None, seconds: float | None = None) -> bool:
        """Move `step_id` forward to `phase`; True if this call moved it, False if it was already there or past.

        Atomic: a conditional UPDATE (phase_rank < new rank) decides the winner; only the winner then
        merges `metrics` and records `seconds` as the phase's timing, inside the same transaction.
        """
        rank = _rank(phase)
        with self._tx() as s:
            moved = s.execute(update(Step).where(Step.step_id == step_id, Step.phase_rank < rank)
                              .values(phase=phase, phase_rank=rank, updated_at=utc_now())
                              .execution_options(synchronize_session=False))
            row = s.scalars(select(Step).where(Step.step_id == step_id)).first()
            if row is None:
                raise NotFound(f"step {step_id!r} is not in the ledger (call begin_step first)")
            if moved.rowcount == 0:
                return False
            if metrics:
                row.metrics = {**(row.metrics or {}), **_json_safe(metrics)}
            if seconds is not None:
                row.timings = {**(row.timings or {}), phase: float(seconds)}
            if weight_version is not None:
                row.weight_version = weight_version
            return True

    def step(self, step_id: str) -> StepRecord:
        with self._tx() as s:
            row = s.scalars(select(Step).where(Step.step_id == step_id)).first()
            if row is None:
                raise NotFound(f"step {step_id!r} is not in the ledger")
            return _step_record(row)

    def steps(self, run_id: int, stage: int | None = None) -> list[StepRecord]:
        with self._tx() as s:
            q = select(Step).where(Step.run_id == run_id)
            if stage is not None:
                q = q.where(Step.stage_index == stage)
            return [_step_record(r) for r in s.scalars(q.order_by(Step.stage_index, Step.step_index))]

    def resume_point(self, run_id: int) -> ResumePoint:
        """Where to continue: the first stage not finished, and in it the first step not `done`."""
        with self._tx() as s:
            self._run(s, run_id)
            stages = s.scalars(select(Stage).where(Stage.run_id == run_id).order_by(Stage.index)).all()
            versions = [v for v in s.scalars(select(Step.weight_version).where(Step.run_id == run_id)) if v is not None]
            version = max(versions) if versions else None
            open_stages = [st for st in stages if st.status not in ("succeeded", "cancelled")]
            if stages and not open_stages:
                return ResumePoint(stages[-1].index + 1, 0, None, version, finished=True)
            stage = open_stages[0].index if open_stages else 0
            if version is None and open_stages:
                version = open_stages[0].start_weight_version
            in_stage = select(Step).where(Step.run_id == run_id, Step.stage_index == stage)
            # the first step not done: a step sampled ahead (max_staleness) never hides the one before it
            open_step = s.scalars(in_stage.where(Step.phase != "done").order_by(Step.step_index)).first()
            if open_step is not None:
                return ResumePoint(stage, open_step.step_index, open_step.phase, version)
            last = s.scalars(in_stage.order_by(Step.step_index.desc())).first()
            if last is None:
                return ResumePoint(stage, 0, None, version)
            return ResumePoint(stage, last.step_index + 1, None, version)

    # --------------------------------------------------------------------- evals, teachers, weights
    def record_eval(self, run_id: int, stage: int, step: int, weight_version: int, checkpoint: str,
                    domain: str, score: float, n: int, per_prompt: dict[str, float] | None = None) -> bool:
        """Record one domain's validation score (and the per-prompt scores behind it, {task id: score},
        in the same transaction); False if (run, stage, step, domain) was already recorded."""
        return self._add_score(run_id, score, n, per_prompt, lambda: Eval(
            run_id=run_id, stage_index=stage, step_index=step, weight_version=weight_version,
            checkpoint=checkpoint, domain=domain, score=float(score), n=n),
            lambda scores: PromptScores(run_id=run_id, source="eval", stage_index=stage, step_index=step,
                                        domain=domain, scores=scores))

    def _add_score(self, run_id: int, score: float, n: int, per_prompt: dict[str, float] | None, row,
                   prompt_row) -> bool:
        """Add row() - a score over n samples - and prompt_row(per_prompt) when given, once; False when
        its unique key is already there."""
        if not math.isfinite(score):
            raise InvalidArgument("score", f"must be a finite number (got {score})")
        if n < 1:
            raise InvalidArgument("n", f"must be >= 1 (got {n})")
        scores = _per_prompt(per_prompt)
        try:
            with self._tx() as s:
                self._run(s, run_id)
                s.add(row())
                if scores is not None:
                    s.add(prompt_row(scores))
            return True
        except IntegrityError:
            return False

    def prompt_scores(self, run_id: int) -> dict[tuple[str, int, int, str], dict[str, float]]:
        """{(source, stage, step, domain): {task id: score}} of every evaluation (`eval`) and fresh draw
        (`teacher` / `student`, step 0) of the run that kept its per-prompt scores."""
        with self._tx() as s:
            rows = s.scalars(select(PromptScores).where(PromptScores.run_id == run_id)).all()
            return {(r.source, r.stage_index, r.step_index, r.domain): dict(r.scores) for r in rows}

    def evals(self, run_id: int, domain: str | None = None, before_stage: int | None = None) -> list[EvalRecord]:
        """Evaluations of a run in the order they happened (stage, then step)."""
        with self._tx() as s:
            q = select(Eval).where(Eval.run_id == run_id)
            if domain is not None:
                q = q.where(Eval.domain == domain)
            if before_stage is not None:
                q = q.where(Eval.stage_index < before_stage)
            rows = s.scalars(q.order_by(Eval.stage_index, Eval.step_index, Eval.id)).all()
            return [EvalRecord(r.stage_index, r.step_index, r.weight_version, r.checkpoint, r.domain, r.score, r.n)
                    for r in rows]

    def record_teacher(self, run_id: int, stage: int, domain: str, checkpoint: str, score: float) -> None:
        """The teacher chosen for `domain` in MOPD stage `stage` (the same choice again is a no-op)."""
        with self._tx() as s:
            row = s.scalars(select(TeacherChoice).where(TeacherChoice.run_id == run_id, TeacherChoice.stage_index == stage,
                                                        TeacherChoice.domain == domain)).first()
            if row is None:
                s.add(TeacherChoice(run_id=run_id, stage_index=stage, domain=domain, checkpoint=checkpoint, score=score))
            elif row.checkpoint != checkpoint:
                raise FailedPrecondition(f"run {run_id} stage {stage}: teacher for {domain} is already {row.checkpoint!r}")

    def teachers(self, run_id: int, stage: int) -> dict[str, tuple[str, float]]:
        with self._tx() as s:
            rows = s.scalars(select(TeacherChoice).where(TeacherChoice.run_id == run_id,
                                                         TeacherChoice.stage_index == stage)).all()
            return {r.domain: (r.checkpoint, r.score) for r in rows}

    FRESH_ROLES = ("teacher", "student")

    def record_fresh_eval(self, run_id: int, stage: int, role: str, domain: str, checkpoint: str,
                          score: float, n: int, per_prompt: dict[str, float] | None = None) -> bool:
        """MOPD stage `stage`'s teacher (role `teacher`) or student (`student`) for `domain` drawn again
        with the fresh-eval seed (with its per-prompt scores, as record_eval); False if already recorded."""
        if role not in self.FRESH_ROLES:
            raise InvalidArgument("role", f"must be one of {', '.join(self.FRESH_ROLES)} (got {role!r})")
        return self._add_score(run_id, score, n, per_prompt, lambda: FreshEval(
            run_id=run_id, stage_index=stage, role=role, domain=domain, checkpoint=checkpoint, score=float(score), n=n),
            lambda scores: PromptScores(run_id=run_id, source=role, stage_index=stage, step_index=0,
                                        domain=domain, scores=scores))

    def fresh_evals(self, run_id: int, stage: int, role: str) -> dict[str, float]:
        """{domain: score} of `role` in MOPD stage `stage` (domains not drawn again are absent)."""
        with self._tx() as s:
            rows = s.scalars(select(FreshEval).where(FreshEval.run_id == run_id, FreshEval.stage_index == stage,
                                                     FreshEval.role == role)).all()
            return {r.domain: r.score for r in rows}

    def fresh_draws(self, run_id: int, stage: int) -> dict[str, dict[str, float]]:
        """{role: {domain: score}} of MOPD stage `stage`, every role present (empty when not drawn)."""
        return {role: self.fresh_evals(run_id, stage, role) for role in self.FRESH_ROLES}

    def record_weight_version(self, run_id: int, version: int, uri: str, sha256: str) -> None:
        """A published weight version; the same version with another checksum is refused."""
        with self._tx() as s:
            row = s.scalars(select(WeightVersion).where(WeightVersion.run_id == run_id,
                                                        WeightVersion.version == version)).first()
            if row is None:
                s.add(WeightVersion(run_id=run_id, version=version, uri=uri, sha256=sha256))
            elif row.sha256 != sha256:
                raise FailedPrecondition(f"run {run_id}: weight version {version} already has sha256 {row.sha256}")

    def weight_versions(self, run_id: int) -> list[tuple[int, str, str]]:
        with self._tx() as s:
            rows = s.scalars(select(WeightVersion).where(WeightVersion.run_id == run_id)
                             .order_by(WeightVersion.version)).all()
            return [(r.version, r.uri, r.sha256) for r in rows]


def _per_prompt(per_prompt: dict[str, float] | None) -> dict[str, float] | None:
    """{task id: finite score}, or None when not given; anything else is refused naming the field."""
    if per_prompt is None:
        return None
    if not per_prompt:
        raise InvalidArgument("per_prompt", "must score at least one prompt (or be left out)")
    out = {}
    for task, score in per_prompt.items():
        if not isinstance(task, str) or not isinstance(score, int | float) or not math.isfinite(score):
            raise InvalidArgument("per_prompt", f"must map task ids to finite scores (got {task!r}: {score!r})")
        out[task] = float(score)
    return out


def _json_safe(metrics: dict[str, Any]) -> dict[str, Any]:
    """NaN / inf are not JSON: store them as None so every database accepts the row."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


@functools.cache
def ledger_at(url: str) -> Ledger:
    """The process's one Ledger of database `url` (its engine and connection pool shared by every caller)."""
    return Ledger(url)

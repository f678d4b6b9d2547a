"""Celery tasks: thin wrappers that run one phase of one step, an evaluation, or the runner.

Tasks pass IDs (run, stage, step) and re-fetch state from the ledger; every task is idempotent,
so a redelivered message (late ack, worker lost) repeats no work that was recorded. A step is a
chain `phase | phase | ...` built from its step kind's declared phases (services.orchestrator.steps),
each link on the phase's queue (rollout, reward, teacher, train), so every kind of work scales with
its own workers; the last link plans what comes next
(`continue_run`) and the `advance` task on `control` takes the stage changes. Nothing reads a
task's return value (the ledger is the state), so no task stores a result: two result-backend
writes fewer per hop. Transient service errors (UNAVAILABLE, DEADLINE_EXCEEDED,
RESOURCE_EXHAUSTED) and a ledger database or broker that refused or dropped the connection (a
restart) are retried with backoff; any other failure marks the run failed with a one-line reason.

Run a worker: `celery -A services.orchestrator.tasks worker -Q rollout,reward,teacher,train,control`.
"""

from __future__ import annotations

import logging

import grpc
from celery import chain
from kombu.exceptions import OperationalError as BrokerUnreachable
from sqlalchemy.exc import DBAPIError, OperationalError

from services.orchestrator import metrics as _metrics  # noqa: F401  (worker metrics: Celery signal hooks)
from services.orchestrator import runner
from services.orchestrator.celery_app import build_celery, declare_queues
from services.orchestrator.context import context_for
from services.orchestrator.steps import STEP_KINDS

log = logging.getLogger(__name__)
app = build_celery()
TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
MAX_RETRIES = 5


def _unreachable(exc: Exception) -> bool:
    """The ledger's database or the broker refused or dropped the connection, or is still recovering
    (a restart): worth a retry, since tasks are idempotent and the run could not be marked failed
    meanwhile anyway. (The broker is reached when a step's last link enqueues the next step.)"""
    if isinstance(exc, BrokerUnreachable):
        return True
    return isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError) and exc.connection_invalidated)


def _backoff(task):
    """The Retry to raise: the task again in 1, 2, 4, ... 30 s, at most MAX_RETRIES times."""
    return task.retry(countdown=min(2 ** task.request.retries, 30), max_retries=MAX_RETRIES)


def _guard(task, run_id: int, work) -> None:
    """Run `work()`; retry transient errors, fail the run on anything else."""
    try:
        ctx = context_for(run_id)
    except Exception as exc:  # a new worker's first task while the ledger's database restarts
        if _unreachable(exc) and task.request.retries < MAX_RETRIES:
            raise _backoff(task) from exc
        raise
    try:
        work(ctx)
    except grpc.RpcError as err:
        if err.code() in TRANSIENT and task.request.retries < MAX_RETRIES:
            raise _backoff(task) from err
        _fail(ctx, task.name, f"{err.code().name}: {err.details()}")
        raise
    except Exception as exc:
        if _unreachable(exc) and task.request.retries < MAX_RETRIES:
            raise _backoff(task) from exc
        _fail(ctx, task.name, f"{type(exc).__name__}: {exc}")
        raise


def _fail(ctx, where: str, reason: str) -> None:
    line = f"{where}: {reason}".splitlines()[0]
    log.error("run failed", extra={"run_id": ctx.run_id, "reason": line})
    ctx.ledger.set_run_status(ctx.run_id, "failed", error=line)


def _phase_task(queue: str):
    @app.task(name=f"cascade.{queue}.phase", bind=True, acks_late=True, shared=False, ignore_result=True)
    def phase(self, run_id: int, stage: int, step: int, name: str, last: bool = False) -> None:
        def work(ctx):
            if ctx.ledger.run(run_id).status in ("failed", "cancelled"):
                return
            STEP_KINDS[ctx.stage(stage).type].phase(name).run(ctx, stage, step)
            if last:
                continue_run(ctx)

        _guard(self, run_id, work)

    return phase


PHASE_TASKS = {q: _phase_task(q) for q in ("rollout", "reward", "teacher", "train", "control")}


@app.task(name="cascade.rollout.evaluate", bind=True, acks_late=True, shared=False, ignore_result=True)
def evaluate(self, run_id: int, stage: int, step: int, last: bool = False) -> None:
    def work(ctx):
        runner.evaluate(ctx, stage, step)
        if last:
            continue_run(ctx)

    _guard(self, run_id, work)


def continue_run(ctx) -> None:
    """After the last link of a step or an evaluation: when the runner's next action is another
    step or evaluation (the common case), enqueue its chain from here, one hop sooner than a
    separate `advance` task; stage changes, the finish and a cancel go to `advance` on `control`."""
    action = runner.plan(ctx)
    if action.kind in ("step", "eval"):
        step_chain(ctx, action).apply_async()
    else:
        advance.delay(ctx.run_id)


@app.task(name="cascade.control.advance", bind=True, acks_late=True, shared=False, ignore_result=True)
def advance(self, run_id: int) -> str:
    """Do the cheap actions inline, enqueue the next long one (a step or an evaluation), return it."""

    result: dict[str, str] = {}

    def work(ctx):
        if ctx.ledger.run(run_id).status in ("failed", "cancelled", "succeeded"):
            result["action"] = "stopped"
            return
        ctx.ledger.set_run_status(run_id, "running")
        while True:
            action = runner.plan(ctx)
            result["action"] = f"{action.kind}:{action.stage}:{action.step}"
            if action.kind == "cancelled":
                ctx.ledger.set_run_status(run_id, "cancelled")
                return
            if action.kind == "finish":
                ctx.ledger.set_run_status(run_id, "succeeded")
                return
            if action.kind == "start_stage":
                runner.start_stage(ctx, action.stage)
            elif action.kind == "end_stage":
                runner.end_stage(ctx, action.stage)
            else:
                step_chain(ctx, action).apply_async()
                return

    _guard(self, run_id, work)
    return result.get("action", "")


def step_chain(ctx, action: runner.Action):
    """The Celery chain of one step (or one evaluation); its last link decides what comes next."""
    if action.kind == "eval":
        return evaluate.si(ctx.run_id, action.stage, action.step, last=True)
    phases = STEP_KINDS[ctx.stage(action.stage).type].phases
    links = [PHASE_TASKS[p.queue].si(ctx.run_id, action.stage, action.step, p.name, last=i == len(phases) - 1)
             for i, p in enumerate(phases)]
    return chain(*links) if len(links) > 1 else links[0]


def submit(run_id: int, settings=None) -> None:
    """Start (or resume) a run: the runner decides where it stands from the ledger.

    `settings` (OrchestratorSettings) picks another broker than this process's environment.
    """
    client = app if settings is None else build_celery(settings)
    declare_queues(client)
    client.send_task(advance.name, args=[run_id])

"""Tasks a real Celery worker runs in tests/integration/test_celery_brokers.py.

The app comes from `build_celery` with settings read from the environment (CASCADE_ORCH_*), exactly
as a production worker would build it. `where` reports the queue a task arrived on; `apply_step`
is a miniature cascade step: draw the deterministic batch for (seed, stage, step), record the step
in the ledger, and apply it exactly once even when the message is delivered twice.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from services.orchestrator.batches import draw_indices
from services.orchestrator.celery_app import QUEUES, build_celery
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.ledger import Ledger

settings = OrchestratorSettings()
app = build_celery(settings, name="cascade-test")
app.conf.worker_enable_remote_control = False  # no broadcast queues in tests: fewer moving parts
app.conf.worker_lost_wait = 1.0  # requeue a killed child's task after 1 s instead of 10


def _where(task) -> dict:
    info = task.request.delivery_info or {}
    return {"routing_key": info.get("routing_key"), "redelivered": bool(info.get("redelivered"))}


def _make_where(kind: str):
    @app.task(name=f"cascade.{kind}.where", bind=True)
    def where(self) -> dict:
        return _where(self)

    return where


WHERE = {kind: _make_where(kind) for kind in QUEUES}


@app.task(name="cascade.train.apply_step", bind=True)
def apply_step(self, run_id: int, stage: int, step: int, batch_size: int, n_records: int, seed: int,
               hold_s: float, marker_dir: str) -> dict:
    """Begin the step, write `attempt-N` (holding this process's pid), hold on the first attempt so the
    test can kill it, then apply the step — at most once, whatever the number of deliveries."""
    ledger = Ledger(settings.ledger())
    try:
        rec = ledger.begin_step(run_id, stage, step)
        batch = draw_indices(n_records, seed, stage, step, batch_size)
        Path(marker_dir, f"attempt-{rec.attempts}").write_text(str(os.getpid()))
        if rec.attempts == 1 and hold_s > 0:
            time.sleep(hold_s)
        applied = ledger.advance(rec.step_id, "trained", metrics={"batch": batch, "applied_by_attempt": rec.attempts})
        ledger.advance(rec.step_id, "done")
        return {"applied": applied, "attempts": rec.attempts, "batch": batch, **_where(self)}
    finally:
        ledger.close()

"""Submitting, cancelling and resuming runs: the one public way, used by the CLI and the API alike.

A run is recorded in the ledger first (status pending) and then handed to the orchestrator by its
id (`start`: in production tasks.submit on the configured broker, which enqueues the runner's first
`advance`). A cancel is a flag the runner reads between phases; a resume clears a failure and hands
the id over again, the runner continuing from what the ledger says was done. `run_control()` builds
the production one from OrchestratorSettings; tests pass their own `start`. This module knows the
ledger and the start callable, not Celery or HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from services.common.errors import CascadeError, FailedPrecondition
from services.orchestrator.cascade_config import CascadeConfig, CascadeConfigError
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.datasets import missing_data
from services.orchestrator.ledger import Ledger, ledger_at

log = logging.getLogger(__name__)
TERMINAL = ("succeeded", "failed", "cancelled")


class SubmitFailed(CascadeError):
    """The run was recorded but could not be handed to the orchestrator (broker unreachable)."""


class RunControl:
    """Submit, cancel and resume the runs of one ledger; `start(run_id)` hands a recorded run over."""

    def __init__(self, ledger: Ledger, start: Callable[[int], None]):
        self.ledger = ledger
        self.start = start
        """Hands a recorded run's id to the orchestrator."""

    def submit(self, cascade: CascadeConfig, source: str = "cascade") -> int:
        """Record a validated cascade as a new run and start it; its id. A cascade whose data folder
        lacks a file a stage reads is refused (CascadeConfigError, each problem prefixed by `source`)
        before anything is recorded; a failed hand-over marks the run failed with the reason and
        raises SubmitFailed."""
        self.refuse_missing_data(cascade, source)
        run_id = self.ledger.create_run(cascade.name, cascade.model_dump(mode="json"))
        self._hand_over(run_id)
        log.info("run submitted", extra={"run_id": run_id, "cascade": cascade.name})
        return run_id

    @staticmethod
    def refuse_missing_data(cascade: CascadeConfig, source: str = "cascade") -> None:
        """Raise CascadeConfigError naming every stage, domain and file the cascade's data folder lacks."""
        if problems := missing_data(cascade):
            raise CascadeConfigError([f"{source}: {p}" for p in problems])

    def cancel(self, run_id: int) -> None:
        """Ask the runner to stop after the phase in flight; a finished run cannot be cancelled."""
        status = self.ledger.run(run_id).status
        if status in TERMINAL:
            raise FailedPrecondition(f"run {run_id} already {status}; only pending or running runs can be cancelled")
        self.ledger.request_cancel(run_id)

    def resume(self, run_id: int) -> None:
        """Continue a run from its last recorded phase (after a crash, a failure or a restart)."""
        if self.ledger.run(run_id).status == "succeeded":
            raise FailedPrecondition(f"run {run_id} already succeeded; nothing to resume")
        self.ledger.set_run_status(run_id, "running", error="")
        self._hand_over(run_id)

    def _hand_over(self, run_id: int) -> None:
        try:
            self.start(run_id)
        except Exception as exc:  # the broker is down or misconfigured: say so on the run and to the caller
            reason = f"could not hand the run to the orchestrator: {type(exc).__name__}: {exc}".splitlines()[0]
            self.ledger.set_run_status(run_id, "failed", error=reason)
            raise SubmitFailed(f"run {run_id}: {reason}") from exc


def run_control(settings: OrchestratorSettings | None = None) -> RunControl:
    """The production RunControl: the settings' ledger, runs started on the settings' broker
    (settings read now when not given: the environment may have changed since import)."""
    settings = settings or OrchestratorSettings()

    def start(run_id: int) -> None:
        from services.orchestrator import tasks  # imported on first start: it builds a Celery app

        tasks.submit(run_id, settings)

    return RunControl(ledger_at(settings.ledger()), start)

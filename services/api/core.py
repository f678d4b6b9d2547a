"""The control plane's core: submit, list, read and cancel runs over the step ledger.

`ControlCore` parses a cascade sent as YAML or JSON text with the same validation as
`cascade run` (every bad field listed, CascadeConfigError), records the run in the ledger and
hands its id to a submitter (the orchestrator's Celery `submit`); reads are ledger queries turned
into typed models by services.api.views. It knows nothing about HTTP or FastAPI: errors are the
typed errors of services.common.errors plus the few below, and app.py maps them to status codes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import yaml
from pydantic import ValidationError
from sqlalchemy import text

from services.api import views
from services.api.schemas import (
    RunClaims,
    RunDetail,
    RunEpisodes,
    RunEvals,
    RunMetrics,
    RunMismatch,
    RunSummary,
    RunTeachers,
)
from services.common.errors import CascadeError
from services.orchestrator.cascade_config import CascadeConfig, CascadeConfigError, format_problems
from services.orchestrator.control import RunControl, SubmitFailed, run_control  # noqa: F401  (SubmitFailed re-exported)
from services.orchestrator.ledger import Ledger

log = logging.getLogger(__name__)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
JSON_TYPES = ("application/json",)
SOURCE = "body"
"""How problems in a submitted cascade are prefixed (`body: stages[0].steps: ...`)."""


class UnsupportedMediaType(CascadeError):
    """The request body is neither YAML nor JSON."""


class PayloadTooLarge(CascadeError):
    """The request body is over the configured limit."""


def parse_cascade(body: bytes, content_type: str | None) -> CascadeConfig:
    """A validated cascade from YAML (application/yaml, text/yaml) or JSON (application/json) text.

    Raises UnsupportedMediaType for any other type, CascadeConfigError listing every problem otherwise.
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in YAML_TYPES + JSON_TYPES:
        raise UnsupportedMediaType(
            f"Content-Type {media or '(none)'!r} is not a cascade; send YAML ({', '.join(YAML_TYPES)}) "
            f"or JSON ({', '.join(JSON_TYPES)})")
    kind = "JSON" if media in JSON_TYPES else "YAML"
    try:
        source = body.decode("utf-8")
        raw = json.loads(source) if kind == "JSON" else yaml.safe_load(source)
    except UnicodeDecodeError as exc:
        raise CascadeConfigError([f"{SOURCE}: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from exc
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise CascadeConfigError([f"{SOURCE}: not valid {kind}: {exc}".replace("\n", " ")]) from exc
    if not isinstance(raw, dict):
        shape = f"the top level must be a mapping with name, model and stages (got {type(raw).__name__})"
        raise CascadeConfigError([f"{SOURCE}: {shape}"])
    try:
        return CascadeConfig.model_validate(raw)
    except ValidationError as exc:
        raise CascadeConfigError(format_problems(exc, SOURCE)) from exc


class ControlCore:
    """Runs as the API sees them. `submit(run_id)` starts a recorded run (tasks.submit in production)."""

    def __init__(self, ledger: Ledger, submit: Callable[[int], None], max_body_bytes: int = 1 << 20):
        self.ledger = ledger
        self.control = RunControl(ledger, submit)
        self.max_body_bytes = max_body_bytes

    # --------------------------------------------------------------------------------- writes
    def submit(self, body: bytes, content_type: str | None) -> RunDetail:
        """Validate, record and start a cascade; the new run (status pending until a worker takes it)."""
        if len(body) > self.max_body_bytes:
            raise PayloadTooLarge(f"the cascade is {len(body)} bytes; the limit is {self.max_body_bytes} "
                                  "(CASCADE_API_MAX_BODY_KB)")
        return self.run(self.control.submit(parse_cascade(body, content_type), source=SOURCE))

    def cancel(self, run_id: int) -> RunDetail:
        """Ask the runner to stop after the phase in flight; a finished run cannot be cancelled."""
        self.control.cancel(run_id)
        return self.run(run_id)

    # ---------------------------------------------------------------------------------- reads
    def runs(self) -> list[RunSummary]:
        return [views.run_summary(r, self.ledger.steps(r.id)) for r in self.ledger.runs()]

    def run(self, run_id: int) -> RunDetail:
        record = self.ledger.run(run_id)
        return views.run_detail(record, self.ledger.steps(run_id))

    def metrics(self, run_id: int) -> RunMetrics:
        record = self.ledger.run(run_id)
        return views.run_metrics(record, self.ledger.steps(run_id))

    def episodes(self, run_id: int) -> RunEpisodes:
        record = self.ledger.run(run_id)
        return views.run_episodes(record, views.run_metrics(record, self.ledger.steps(run_id)))

    def mismatch(self, run_id: int) -> RunMismatch:
        return views.run_mismatch(self.metrics(run_id))

    def evals(self, run_id: int) -> RunEvals:
        record = self.ledger.run(run_id)
        return views.run_evals(record, self.ledger.evals(run_id))

    def teachers(self, run_id: int) -> RunTeachers:
        record = self.ledger.run(run_id)
        mopd = [i for i, st in enumerate(views.stage_list(record)) if st["type"] == "mopd"]
        chosen = {i: picks for i in mopd if (picks := self.ledger.teachers(run_id, i))}
        return views.run_teachers(record, chosen, {i: self.ledger.fresh_draws(run_id, i) for i in chosen})

    def claims(self, run_id: int) -> RunClaims:
        """The method's claims over the evaluations recorded so far, with their intervals
        (services.orchestrator.report.run_claims)."""
        from services.orchestrator.report import run_claims

        return views.run_claims(self.ledger.run(run_id), run_claims(self.ledger, run_id))

    def run_index(self) -> list[tuple[int, str]]:
        """(id, status) of every run, newest first; cheaper than `runs()` (no steps are read)."""
        return sorted(((r.id, r.status) for r in self.ledger.runs()), reverse=True)

    def healthy(self) -> bool:
        """True when the ledger's database answers a trivial query."""
        try:
            with self.ledger.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except Exception:  # noqa: BLE001 - any failure means "not healthy"
            return False


def build_core(max_body_kb: int = 1024, orchestrator=None) -> ControlCore:
    """The production core: the orchestrator's ledger, and Celery's `submit` on its broker."""
    from services.orchestrator.config import OrchestratorSettings

    orch = orchestrator or OrchestratorSettings()

    control = run_control(orch)
    return ControlCore(control.ledger, control.start, max_body_kb * 1024)

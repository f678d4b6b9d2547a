"""Prometheus metrics of the control API: its own requests, and run progress read from the ledger at scrape time.

The API's request counter and latency histogram live in a registry per app (so tests can build
several apps). The orchestrator's progress (runs by status, stage / step progress, the latest
validation reward per domain, seconds per step phase) is computed from the ledger by a collector
each time /metrics is scraped: the ledger is the truth, so nothing can drift. Names follow
DESIGN.md section 7 (`cascade_<service>_<what>_<unit>`). This module knows nothing about HTTP routes.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from services.api import views
from services.api.core import ControlCore
from services.common.metrics import LATENCY_BUCKETS
from services.orchestrator.ledger import RUN_STATUSES

log = logging.getLogger(__name__)


class LedgerCollector:
    """Run / stage / step progress and per-domain rewards of the most recent runs, read at scrape time."""

    def __init__(self, core: ControlCore, max_runs: int):
        self.core = core
        self.max_runs = max_runs

    def describe(self):
        return []  # computed at scrape time; nothing to check at registration

    def collect(self):
        up = GaugeMetricFamily("cascade_api_ledger_up", "1 when the ledger answered the last scrape, else 0.")
        try:
            families = self._families()
        except Exception:  # a broken ledger must not break the API's own metrics
            log.exception("reading the ledger for /metrics failed")
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from families

    def _families(self) -> list:
        g = {
            "runs": GaugeMetricFamily("cascade_orchestrator_runs", "Runs in the ledger, by status.", labels=["status"]),
            "status": GaugeMetricFamily("cascade_orchestrator_run_status",
                                        "1 for the run's current status.", labels=["run", "name", "status"]),
            "steps_done": GaugeMetricFamily("cascade_orchestrator_run_steps_done",
                                            "Steps done over all stages of the run.", labels=["run"]),
            "steps_planned": GaugeMetricFamily("cascade_orchestrator_run_steps_planned",
                                               "Steps the run's cascade asks for.", labels=["run"]),
            "stages_done": GaugeMetricFamily("cascade_orchestrator_run_stages_done",
                                             "Stages of the run that succeeded.", labels=["run"]),
            "stages_planned": GaugeMetricFamily("cascade_orchestrator_run_stages_planned",
                                                "Stages in the run's cascade.", labels=["run"]),
            "stage_done": GaugeMetricFamily("cascade_orchestrator_stage_steps_done",
                                            "Steps done in the stage.", labels=["run", "stage"]),
            "stage_planned": GaugeMetricFamily("cascade_orchestrator_stage_steps_planned",
                                               "Steps the stage asks for.", labels=["run", "stage"]),
            "reward": GaugeMetricFamily("cascade_orchestrator_domain_reward",
                                        "Latest validation reward of the domain (mean over its prompts).",
                                        labels=["run", "domain"]),
        }
        mismatch = GaugeMetricFamily(
            "cascade_orchestrator_train_mismatch",
            "Train/inference mismatch of the run's latest trained RL step: per-token |log pi_train - log pi_inf| "
            "(mismatch_mean, mismatch_p99, mismatch_max), the share of tokens outside MOPD's window "
            "(window_dropped_fraction) and the sequence-level KL(pi_inf || pi_train) estimate (kl_inf_train).",
            labels=["run", "stat"])
        phase = CounterMetricFamily("cascade_orchestrator_step_phase_seconds",
                                    "Seconds spent in each phase group over every step of the run.",
                                    labels=["run", "phase"])
        index = self.core.run_index()
        tally = Tally(status for _id, status in index)
        for status in sorted(set(RUN_STATUSES) | set(tally)):
            g["runs"].add_metric([status], tally[status])
        for run_id, _status in index[: self.max_runs]:
            detail = self.core.run(run_id)
            run = str(run_id)
            g["status"].add_metric([run, detail.name, detail.status], 1)
            g["steps_done"].add_metric([run], detail.steps_done)
            g["steps_planned"].add_metric([run], detail.steps_total)
            g["stages_done"].add_metric([run], detail.stages_done)
            g["stages_planned"].add_metric([run], detail.stages_total)
            for stage in detail.stages:
                g["stage_done"].add_metric([run, stage.name], stage.steps_done)
                g["stage_planned"].add_metric([run, stage.name], stage.steps_total)
            for domain, score in views.latest_rewards(self.core.evals(run_id)).items():
                g["reward"].add_metric([run, domain], score)
            steps = self.core.metrics(run_id)
            for group, seconds in views.phase_totals(steps).items():
                phase.add_metric([run, group], seconds)
            for stat, value in views.latest_mismatch(steps).items():
                mismatch.add_metric([run, stat], value)
        return [*g.values(), mismatch, phase]


class ApiMetrics:
    """The registry behind /metrics: request counts and latencies, plus the ledger collector."""

    def __init__(self, core: ControlCore, max_runs: int):
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter("cascade_api_requests", "HTTP requests served, by method, route and status code.",
                                ["method", "route", "code"], registry=self.registry)
        self.latency = Histogram("cascade_api_request_duration_seconds", "Latency of HTTP requests, by method and route.",
                                 ["method", "route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(LedgerCollector(core, max_runs))

    def observe(self, method: str, route: str, code: int, seconds: float) -> None:
        self.requests.labels(method, route, str(code)).inc()
        self.latency.labels(method, route).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)

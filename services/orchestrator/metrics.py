"""Prometheus metrics of the orchestrator's Celery workers (DESIGN.md section 7).

Counts the tasks each worker started, finished, failed and retried, times them, and polls the
depth of the queues it consumes, all labelled by `queue` (the broker queue, prefix included) and
`task` (the unit of work: a phase task is labelled by its phase `name` argument — generate, score,
teach, train, sync, finish — any other task by the last part of its name — evaluate, advance).

Hooked to Celery's signals when `services.orchestrator.tasks` is imported:
- `worker_ready` (the worker's main process): serves /metrics on CASCADE_ORCH_METRICS_PORT
  (bound to CASCADE_ORCH_HOST) and starts the queue-depth poller. With the `threads` or `solo`
  pool, which Cascade's workers use, the tasks run in this process and all metrics are here.
- `worker_process_init` (each child of a `prefork` pool): serves that child's task metrics on
  METRICS_PORT + 1 + the child's index, so every child is scrapable too.
Unset CASCADE_ORCH_METRICS_PORT and nothing is served. This module knows nothing about what the
tasks do; it only watches them.
"""

from __future__ import annotations

import logging
import threading
import time

from celery import signals
from prometheus_client import Counter, Gauge, Histogram

from services.common.metrics import LATENCY_BUCKETS, start_metrics_server

log = logging.getLogger(__name__)

LABELS = ("queue", "task")
STARTED = Counter("cascade_orchestrator_tasks_started_total", "Tasks a worker started, by queue and task.", LABELS)
SUCCEEDED = Counter("cascade_orchestrator_tasks_succeeded_total", "Tasks that returned, by queue and task.", LABELS)
FAILED = Counter("cascade_orchestrator_tasks_failed_total", "Tasks that raised (not retried), by queue and task.",
                 LABELS)
RETRIED = Counter("cascade_orchestrator_tasks_retried_total", "Tasks re-queued for a retry, by queue and task.",
                  LABELS)
DURATION = Histogram("cascade_orchestrator_task_duration_seconds", "Wall time of one task run, by queue and task.",
                     LABELS, buckets=LATENCY_BUCKETS)
QUEUE_DEPTH = Gauge("cascade_orchestrator_queue_depth", "Messages waiting in a broker queue (polled).", ["queue"])
EPISODES = Counter("cascade_orchestrator_episodes_total", "Multi-turn episodes ended, by environment and verdict "
                   "(ok, error, limit_turns, limit_tokens, limit_env_seconds, ...).", ["env", "verdict"])
EPISODE_TURNS = Histogram("cascade_orchestrator_episode_turns", "Assistant turns of one episode, by environment.",
                          ["env"], buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32, 64))
ENV_SECONDS_PER_TURN = Histogram("cascade_orchestrator_env_seconds_per_turn",
                                 "Environment seconds of one episode's turn (its Env.Step), by environment.",
                                 ["env"], buckets=LATENCY_BUCKETS)
TOOL_ERRORS = Counter("cascade_orchestrator_tool_errors_total", "Tool calls that came back as errors, by environment.",
                      ["env"])
ENV_RETRIES = Counter("cascade_orchestrator_env_retries_total",
                      "Episodes the env service lost, by environment and outcome: `replayed` (a fresh episode "
                      "took the policy's turns again), `restarted` (started over), `lost` (masked, retries spent).",
                      ["env", "outcome"])
POLL_INTERVAL_S = 5.0
"""Seconds between two queue-depth polls."""

_lock = threading.Lock()
_running: dict[str, tuple[tuple[str, str], float]] = {}
_poller: QueueDepthPoller | None = None


def task_labels(task, args: tuple | list | None, kwargs: dict | None) -> tuple[str, str]:
    """(queue, task) labels of one task run: the queue it was delivered from and its unit of work."""
    from services.orchestrator.celery_app import queue_for

    delivery = getattr(task.request, "delivery_info", None) or {}
    queue = delivery.get("routing_key") or queue_for(task.name)
    name = task.name.rsplit(".", 1)[-1]
    if name == "phase":
        method = (kwargs or {}).get("name")
        if method is None and args and len(args) >= 4:
            method = args[3]
        name = str(method) if method else name
    return queue, name


def observe_start(task_id: str, labels: tuple[str, str]) -> None:
    """A task started: count it, make its outcome series exist (at 0) and start its clock."""
    STARTED.labels(*labels).inc()
    for counter in (SUCCEEDED, FAILED, RETRIED):
        counter.labels(*labels)
    with _lock:
        _running[task_id] = (labels, time.perf_counter())


def observe_outcome(task_id: str, counter: Counter) -> None:
    """Count a success, failure or retry of a started task."""
    with _lock:
        entry = _running.get(task_id)
    if entry is not None:
        counter.labels(*entry[0]).inc()


def observe_end(task_id: str) -> None:
    """A task run ended (whatever its outcome): record its duration."""
    with _lock:
        entry = _running.pop(task_id, None)
    if entry is not None:
        DURATION.labels(*entry[0]).observe(time.perf_counter() - entry[1])


def queue_depths(app, names: list[str]) -> dict[str, int]:
    """Messages waiting in each named queue, as the broker counts them.

    kombu's virtual transports (Redis, the SQL broker) count their stored messages (`_size`; Redis
    drops an empty list, so asking whether the queue exists would miss every empty queue); AMQP
    brokers (RabbitMQ) answer a passive declare. A queue that cannot be counted is left out.
    """
    depths: dict[str, int] = {}
    with app.connection_for_read() as conn:
        for name in names:
            try:
                channel = conn.channel()
                try:
                    if hasattr(channel, "_size"):
                        depths[name] = int(channel._size(name))
                    else:
                        depths[name] = int(channel.queue_declare(queue=name, passive=True).message_count)
                finally:
                    channel.close()
            except Exception as exc:  # noqa: BLE001  (missing queue, or a transport without counts)
                log.debug("queue depth unavailable", extra={"queue": name, "error": str(exc)})
    return depths


class QueueDepthPoller:
    """A daemon thread that sets QUEUE_DEPTH for `names` every `interval` seconds."""

    def __init__(self, app, names: list[str], interval: float = POLL_INTERVAL_S):
        self.app, self.names, self.interval = app, list(names), interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="queue-depth", daemon=True)

    def start(self) -> QueueDepthPoller:
        self._thread.start()
        return self

    def poll(self) -> dict[str, int]:
        depths = queue_depths(self.app, self.names)
        for name, depth in depths.items():
            QUEUE_DEPTH.labels(name).set(depth)
        return depths

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001  (broker briefly away: try again next round)
                log.warning("queue depth poll failed", extra={"error": str(exc)})
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 1)


def _settings():
    from services.orchestrator.config import OrchestratorSettings

    return OrchestratorSettings()


@signals.worker_ready.connect
def _on_worker_ready(sender=None, **_kw) -> None:
    global _poller
    settings = _settings()
    if settings.metrics_port is None:
        return
    port = start_metrics_server(settings.metrics_port, settings.host)
    app = sender.app
    names = sorted(app.amqp.queues.consume_from)
    _poller = QueueDepthPoller(app, names).start()
    log.info("worker metrics", extra={"metrics_port": port, "queues": names})


@signals.worker_process_init.connect
def _on_child_init(**_kw) -> None:
    from billiard.process import current_process

    settings = _settings()
    if settings.metrics_port is None:
        return
    index = getattr(current_process(), "index", 0) or 0
    port = settings.metrics_port + 1 + index if settings.metrics_port else 0
    start_metrics_server(port, settings.host)


@signals.task_prerun.connect
def _on_prerun(task_id=None, task=None, args=None, kwargs=None, **_kw) -> None:
    observe_start(task_id, task_labels(task, args, kwargs))


@signals.task_success.connect
def _on_success(sender=None, **_kw) -> None:
    observe_outcome(sender.request.id, SUCCEEDED)


@signals.task_failure.connect
def _on_failure(task_id=None, **_kw) -> None:
    observe_outcome(task_id, FAILED)


@signals.task_retry.connect
def _on_retry(request=None, **_kw) -> None:
    observe_outcome(request.id, RETRIED)


@signals.task_postrun.connect
def _on_postrun(task_id=None, **_kw) -> None:
    observe_end(task_id)


def observe_episodes(env: str, out: dict) -> None:
    """A step's episodes (episodes.run_episodes' output): verdicts, turns, env seconds per turn, tool errors,
    and the episodes the env service lost, by how each went on."""
    for verdict, turns, steps, seconds in zip(out["verdicts"], out["turns"], out["env_steps"], out["env_seconds"]):
        EPISODES.labels(env, verdict).inc()
        EPISODE_TURNS.labels(env).observe(turns)
        if steps:
            ENV_SECONDS_PER_TURN.labels(env).observe(seconds / steps)
    TOOL_ERRORS.labels(env).inc(sum(out["tool_errors"]))
    for outcome, key in (("replayed", "env_replays"), ("restarted", "env_restarts"), ("lost", "env_lost")):
        ENV_RETRIES.labels(env, outcome).inc(sum(out.get(key, ())))

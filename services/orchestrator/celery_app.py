"""The Celery app factory: one queue per kind of work, routing by task-name prefix, at-least-once delivery.

Queues `rollout`, `reward`, `teacher`, `train` and `control` can each get their own workers on
their own nodes. A task named `cascade.<queue>.<what>` goes to queue `<queue>`; anything else goes
to `control`. Delivery is made redelivery-safe by settings (late ack, prefetch 1, re-queue on worker
loss, a visibility timeout longer than any step) and exactly-once by the ledger, not by Celery.
The broker is the embedded SQLite one (kombu's SQLAlchemy transport), Redis or RabbitMQ.
This module knows nothing about what the tasks do.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from celery import Celery, signals
from kombu import Exchange, Queue

from services.common.logs import setup_logging
from services.common.settings import CommonSettings
from services.orchestrator.config import OrchestratorSettings

QUEUES = ("rollout", "reward", "teacher", "train", "control")
TASK_PREFIX = "cascade."
DEFAULT_QUEUE = "control"


def queue_for(task_name: str) -> str:
    """`cascade.rollout.generate` -> `rollout`; names outside the scheme -> `control`."""
    if task_name.startswith(TASK_PREFIX):
        kind = task_name[len(TASK_PREFIX):].split(".", 1)[0]
        if kind in QUEUES:
            return kind
    return DEFAULT_QUEUE


def queue_names(prefix: str = "") -> list[str]:
    """Broker queue names of every kind, e.g. for `celery worker -Q`."""
    return [prefix + q for q in QUEUES]


class _Router:
    """Celery router: each task to the (prefixed) queue of its name's kind."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def __call__(self, name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> dict:
        queue = self.prefix + queue_for(name)
        return {"queue": queue, "routing_key": queue}


def transport_options(settings: OrchestratorSettings) -> dict[str, Any]:
    """Broker transport options: the visibility timeout, then the user's extras.

    kombu's SQLAlchemy transport hands its options to `create_engine`, so for the SQL broker only
    the user's extras go through (a taken message is leased instead: sqla_transport). On Redis a
    running task's visibility is renewed (redis_leases), so the timeout is what a killed worker costs.
    """
    if settings.broker().startswith("sqla+"):
        return dict(settings.broker_transport_options)
    vt = settings.visibility_timeout_s
    sweep = {"unacked_restore_interval": max(1.0, vt / 6), "unacked_restore_throttle": 1}  # look every vt/6 s
    return {"visibility_timeout": vt, **sweep, **settings.broker_transport_options}


def declare_queues(app: Celery, attempts: int = 5) -> list[str]:
    """Declare every queue on the broker once, before workers start (idempotent).

    With the SQL broker a worker and a client declaring the same new queue at the same moment can
    collide on its unique name and kill the worker; declaring up front removes the race.
    """
    names = []
    for queue in app.conf.task_queues:
        for attempt in range(attempts):
            try:
                with app.connection_for_write() as conn:
                    queue.bind(conn.default_channel).declare()
                break
            except Exception:  # the other declarer won: the next try finds the queue
                if attempt == attempts - 1:
                    raise
        names.append(queue.name)
    return names


def broker_url_for(url: str) -> str:
    """The embedded SQL broker goes through our faster-polling transport (sqla_transport)."""
    if url.startswith("sqla+"):
        from services.orchestrator import sqla_transport

        sqla_transport.register()
        return sqla_transport.SCHEME + url[len("sqla"):]
    return url


def build_celery(settings: OrchestratorSettings | None = None, name: str = "cascade") -> Celery:
    """A Celery app for `settings` (read from the environment when None)."""
    settings = settings or OrchestratorSettings()
    for url in (settings.broker(), settings.backend()):
        if "sqlite:///" in url:
            Path(url.split("sqlite:///", 1)[1]).parent.mkdir(parents=True, exist_ok=True)
    prefix = settings.queue_prefix
    exchange = Exchange(prefix + "cascade", type="direct")
    app = Celery(name, broker=broker_url_for(settings.broker()), backend=settings.backend())
    app.conf.update(
        task_queues=[Queue(q, exchange, routing_key=q, durable=True) for q in queue_names(prefix)],
        task_default_queue=prefix + DEFAULT_QUEUE,
        task_default_exchange=exchange.name,
        task_default_routing_key=prefix + DEFAULT_QUEUE,
        task_routes=(_Router(prefix),),
        # At-least-once delivery; the ledger turns it into exactly-once.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        broker_transport_options=transport_options(settings),
        result_backend_transport_options={"visibility_timeout": settings.visibility_timeout_s},
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_track_started=True,
        result_extended=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        enable_utc=True,
    )
    return app


from services.orchestrator import redis_leases  # noqa: E402 - connected below, beside the other signals

signals.task_received.connect(redis_leases.on_received, weak=False)
_worker_command = False


@signals.celeryd_init.connect
def _in_worker_command(**_kwargs: Any) -> None:
    global _worker_command
    _worker_command = True


@signals.setup_logging.connect
def worker_logging(loglevel: int | str | None = None, **_kwargs: Any) -> None:
    """A `celery worker` logs like every service: one JSON object per line (CASCADE_LOG_FORMAT), the
    run's own records (stage started, evaluation reused, retries) and Celery's lifecycle lines
    ("connected", "ready.") at its --loglevel, Celery's per-task lines (received, succeeded) only from
    WARNING. A receiver here stops Celery from configuring logging; a worker embedded in another
    process (tests) leaves that process's logging as it is."""
    if not _worker_command:
        return
    common = CommonSettings()
    level = logging.getLevelName(loglevel) if isinstance(loglevel, int) else (loglevel or common.log_level)
    setup_logging(str(level).upper(), common.log_format)
    quiet = max(logging.WARNING, logging.getLogger().level)
    for name in ("celery.app.trace", "celery.worker.strategy", "kombu", "amqp"):
        logging.getLogger(name).setLevel(quiet)

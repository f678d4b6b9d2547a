"""The Celery app factory: queues, routing by name prefix, reliability settings, broker selection.

These check the configuration object only; tests/integration/test_celery_brokers.py runs real workers.
"""

from __future__ import annotations

import sqlite3

import pytest

from services.orchestrator.celery_app import QUEUES, build_celery, declare_queues, queue_for, queue_names
from services.orchestrator.config import OrchestratorSettings


@pytest.mark.parametrize(("name", "queue"), [
    ("cascade.rollout.generate", "rollout"), ("cascade.reward.score", "reward"),
    ("cascade.teacher.score_tokens", "teacher"), ("cascade.train.step", "train"),
    ("cascade.control.run_stage", "control"), ("cascade.unknown.x", "control"), ("other.task", "control"),
])
def test_queue_for_name_prefix(name, queue):
    assert queue_for(name) == queue


def test_app_declares_one_queue_per_kind_and_routes_by_prefix(tmp_path):
    app = build_celery(OrchestratorSettings(home=tmp_path, queue_prefix="t1."))
    assert [q.name for q in app.conf.task_queues] == queue_names("t1.") == [f"t1.{q}" for q in QUEUES]
    route = app.amqp.router.route({}, "cascade.train.step", args=(), kwargs={})
    assert route["queue"].name == "t1.train"
    assert app.amqp.router.route({}, "misc", args=(), kwargs={})["queue"].name == "t1.control"


def test_reliability_settings(tmp_path):
    app = build_celery(OrchestratorSettings(home=tmp_path, visibility_timeout_s=900, broker_url="redis://h:6379/0",
                                            broker_transport_options={"global_keyprefix": "t."}))
    c = app.conf
    assert (c.task_acks_late, c.task_reject_on_worker_lost, c.worker_prefetch_multiplier) == (True, True, 1)
    assert c.broker_transport_options == {"visibility_timeout": 900, "unacked_restore_interval": 150.0,
                                          "unacked_restore_throttle": 1, "global_keyprefix": "t."}


@pytest.mark.parametrize(("broker", "backend"), [
    (None, None),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1"),
    ("amqp://guest:guest@127.0.0.1:5672//", None),
])
def test_broker_selection(tmp_path, broker, backend):
    app = build_celery(OrchestratorSettings(home=tmp_path, broker_url=broker, result_backend=backend))
    # the embedded SQLite broker goes through the faster-polling subclass of kombu's SQL transport
    assert app.conf.broker_url == (broker or f"cascade-sqla+sqlite:///{tmp_path}/broker.sqlite")
    assert app.conf.result_backend == (backend or f"db+sqlite:///{tmp_path}/results.sqlite")
    # kombu's SQL transport passes its options to create_engine: none of ours may go there
    assert ("visibility_timeout" in app.conf.broker_transport_options) == (broker is not None)


def test_declare_queues_on_the_embedded_broker_is_idempotent(tmp_path):
    tmp_path = tmp_path / "home"  # build_celery creates the embedded broker's folder
    app = build_celery(OrchestratorSettings(home=tmp_path, queue_prefix="d."))
    assert declare_queues(app) == declare_queues(app) == queue_names("d.")
    with sqlite3.connect(tmp_path / "broker.sqlite") as conn:
        names = sorted(r[0] for r in conn.execute("select name from kombu_queue"))
    assert names == sorted(queue_names("d."))


def test_the_embedded_broker_polls_fast_and_keeps_polling_interval_from_sqlalchemy(tmp_path):
    from kombu import Connection

    from services.orchestrator.sqla_transport import DEFAULT_POLLING_INTERVAL

    app = build_celery(OrchestratorSettings(home=tmp_path, broker_transport_options={"polling_interval": 0.02}))
    with app.connection_for_write() as conn:
        conn.connect()
        assert conn.transport.polling_interval == 0.02
        assert conn.default_channel is not None  # creates the engine: would raise if polling_interval reached create_engine
    with Connection(f"cascade-sqla+sqlite:///{tmp_path}/b2.sqlite") as plain:
        assert plain.transport.polling_interval == DEFAULT_POLLING_INTERVAL


def test_the_embedded_broker_file_uses_write_ahead_logging(tmp_path):
    """kombu's default journal fsyncs ~30 ms per commit; every hop of a step commits several times."""
    declare_queues(build_celery(OrchestratorSettings(home=tmp_path)))
    path = tmp_path / "broker.sqlite"
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_cascade_tasks_store_no_result():
    """The ledger is the state: no task writes STARTED/SUCCESS rows to the result backend."""
    from services.orchestrator import tasks

    names = [t for t in tasks.app.tasks if t.startswith("cascade.")]
    assert names and all(tasks.app.tasks[t].ignore_result for t in names)


def test_a_message_published_in_this_process_wakes_the_sqlite_consumer_before_its_next_poll(tmp_path):
    """With a 5 s polling interval, a local publish is still received within a fraction of it."""
    import threading
    import time

    from kombu import Connection

    from services.orchestrator import sqla_transport

    sqla_transport.register()
    url = f"cascade-sqla+sqlite:///{tmp_path}/wake.sqlite"
    options = {"polling_interval": 5.0}
    with Connection(url, transport_options=options) as consumer, Connection(url, transport_options=options) as producer:
        queue = consumer.SimpleQueue("wake")
        producer.SimpleQueue("wake")  # declared on both sides before the consumer starts waiting
        timer = threading.Timer(0.3, lambda: producer.SimpleQueue("wake").put({"n": 1}))
        start = time.monotonic()
        timer.start()
        message = queue.get(timeout=4)
        waited = time.monotonic() - start
        message.ack()
    assert message.payload == {"n": 1}
    assert waited < 2.0, f"waited {waited:.2f}s: the consumer slept out its polling interval"

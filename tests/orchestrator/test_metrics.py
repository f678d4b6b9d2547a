"""Worker metrics: counters, durations and queue depths from a real Celery worker and broker.

A real worker (threads pool, kombu's in-memory broker) runs tasks that succeed, fail and retry;
the Prometheus registry must show exactly those outcomes under the right (queue, task) labels.
Queue depths are asked of the real SQLite broker the embedded orchestrator uses.
"""

from __future__ import annotations

import urllib.request

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu import Queue
from prometheus_client import REGISTRY

from services.common.supervisor import free_port
from services.orchestrator import metrics
from services.orchestrator.celery_app import build_celery, declare_queues
from services.orchestrator.config import OrchestratorSettings


def value(name: str, **labels: str) -> float:
    got = REGISTRY.get_sample_value(name, labels)
    return 0.0 if got is None else got


@pytest.fixture(scope="module")
def app():
    app = Celery("metrics-test", broker="memory://", backend="cache+memory://")
    app.conf.update(task_queues=[Queue("mt.rollout"), Queue("mt.train")], task_default_queue="mt.train",
                    worker_hijack_root_logger=False, task_routes={"cascade.rollout.*": {"queue": "mt.rollout"}})

    @app.task(name="cascade.rollout.phase", bind=True)
    def phase(self, run_id, stage, step, method):
        if method == "flaky" and self.request.retries == 0:
            raise self.retry(countdown=0, max_retries=1)
        if method == "broken":
            raise RuntimeError("boom")
        return method

    @app.task(name="cascade.train.advance")
    def advance(run_id):
        return run_id

    with start_worker(app, pool="threads", concurrency=1, perform_ping_check=False, shutdown_timeout=10):
        yield app


def test_success_failure_and_retry_are_counted_per_queue_and_task(app):
    q = "mt.rollout"
    before = {n: value(f"cascade_orchestrator_tasks_{n}_total", queue=q, task="generate")
              for n in ("started", "succeeded", "failed", "retried")}
    assert app.tasks["cascade.rollout.phase"].delay(1, 0, 0, "generate").get(timeout=20) == "generate"
    assert value("cascade_orchestrator_tasks_started_total", queue=q, task="generate") == before["started"] + 1
    assert value("cascade_orchestrator_tasks_succeeded_total", queue=q, task="generate") == before["succeeded"] + 1
    assert value("cascade_orchestrator_tasks_failed_total", queue=q, task="generate") == before["failed"]

    with pytest.raises(RuntimeError, match="boom"):
        app.tasks["cascade.rollout.phase"].delay(1, 0, 0, "broken").get(timeout=20)
    assert value("cascade_orchestrator_tasks_failed_total", queue=q, task="broken") == 1
    assert value("cascade_orchestrator_tasks_succeeded_total", queue=q, task="broken") == 0

    assert app.tasks["cascade.rollout.phase"].delay(1, 0, 0, "flaky").get(timeout=20) == "flaky"
    assert value("cascade_orchestrator_tasks_retried_total", queue=q, task="flaky") == 1
    assert value("cascade_orchestrator_tasks_started_total", queue=q, task="flaky") == 2
    assert value("cascade_orchestrator_tasks_succeeded_total", queue=q, task="flaky") == 1
    assert value("cascade_orchestrator_task_duration_seconds_count", queue=q, task="flaky") == 2


def test_other_tasks_are_labelled_by_their_name_and_queue(app):
    assert app.tasks["cascade.train.advance"].delay(7).get(timeout=20) == 7
    assert value("cascade_orchestrator_tasks_succeeded_total", queue="mt.train", task="advance") >= 1
    assert value("cascade_orchestrator_task_duration_seconds_sum", queue="mt.train", task="advance") > 0


def test_queue_depth_is_read_from_the_sqlite_broker(tmp_path):
    settings = OrchestratorSettings(home=tmp_path, queue_prefix="depth.")
    client = build_celery(settings)
    names = declare_queues(client)
    for i in range(3):
        client.send_task("cascade.rollout.phase", args=[1, 0, i, "generate"])
    client.send_task("cascade.train.phase", args=[1, 0, 0, "train"])
    depths = metrics.QueueDepthPoller(client, names, interval=0.1).poll()
    assert depths == {"depth.rollout": 3, "depth.reward": 0, "depth.teacher": 0, "depth.train": 1, "depth.control": 0}
    assert value("cascade_orchestrator_queue_depth", queue="depth.rollout") == 3


def test_worker_ready_serves_metrics_on_the_configured_port(app, monkeypatch):
    port = free_port()
    monkeypatch.setenv("CASCADE_ORCH_METRICS_PORT", str(port))
    monkeypatch.setenv("CASCADE_ORCH_HOST", "127.0.0.1")

    class Consumer:  # what Celery's worker hands to worker_ready: its consumer, which knows the app
        pass

    consumer = Consumer()
    consumer.app = app
    metrics.signals.worker_ready.send(sender=consumer)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        metrics._poller.stop()
    assert "cascade_orchestrator_tasks_started_total" in body
    assert 'cascade_orchestrator_queue_depth{queue="mt.rollout"}' in body


@pytest.mark.redis
def test_queue_depth_on_redis_counts_empty_queues_as_zero(redis_url):
    settings = OrchestratorSettings(broker_url=redis_url, result_backend=redis_url,
                                    queue_prefix=f"depth{free_port()}.")
    client = build_celery(settings)
    names = declare_queues(client)
    poller = metrics.QueueDepthPoller(client, names)
    assert poller.poll() == dict.fromkeys(names, 0), "Redis keeps no key for an empty queue; it is still 0"
    client.send_task("cascade.reward.phase", args=[1, 0, 0, "score"])
    assert poller.poll()[settings.queue_prefix + "reward"] == 1
    with client.connection_for_write() as conn:
        conn.default_channel.queue_purge(settings.queue_prefix + "reward")


def test_a_steps_episodes_are_counted_by_verdict_turns_and_env_seconds():
    def value(name, **labels):
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = (value("cascade_orchestrator_episodes_total", env="python", verdict="limit_turns"),
              value("cascade_orchestrator_episode_turns_count", env="python"),
              value("cascade_orchestrator_env_seconds_per_turn_sum", env="python"),
              value("cascade_orchestrator_tool_errors_total", env="python"))
    metrics.observe_episodes("python", {"verdicts": ["limit_turns", "ok", "error"], "turns": [3, 1, 0],
                                        "env_steps": [3, 1, 0], "env_seconds": [0.6, 0.1, 0.0], "tool_errors": [2, 0, 0]})
    after = (value("cascade_orchestrator_episodes_total", env="python", verdict="limit_turns"),
             value("cascade_orchestrator_episode_turns_count", env="python"),
             value("cascade_orchestrator_env_seconds_per_turn_sum", env="python"),
             value("cascade_orchestrator_tool_errors_total", env="python"))
    assert [a - b for a, b in zip(after, before)] == pytest.approx([1.0, 3.0, 0.2 + 0.1, 2.0])
    lost = [value("cascade_orchestrator_env_retries_total", env="python", outcome=o) for o in ("replayed", "lost")]
    metrics.observe_episodes("python", {"verdicts": ["ok", "error"], "turns": [2, 1], "env_steps": [2, 1],
                                        "env_seconds": [0.1, 0.1], "tool_errors": [0, 0], "env_replays": [2, 0],
                                        "env_restarts": [0, 0], "env_lost": [False, True]})
    assert [value("cascade_orchestrator_env_retries_total", env="python", outcome=o) - b
            for o, b in zip(("replayed", "lost"), lost)] == [2.0, 1.0]

"""Real Celery workers on each broker: the embedded SQLite one, Redis and RabbitMQ.

Every test starts `celery worker` subprocesses (prefork pool, one child) on the app that
`build_celery` makes from CASCADE_ORCH_* settings, sends tasks by name from this process, and checks:
tasks run on the queue their name routes to; a worker child killed mid-task (SIGKILL) makes the task
run again (late ack + reject on worker loss); the step it applies is recorded once in the ledger,
even when the message is delivered again. On every broker, killing the *whole* worker also hands the
task to a new worker within seconds, with nobody typing `cascade resume`: RabbitMQ requeues on the
channel's close, Redis after the visibility timeout, the SQL broker when the dead worker's lease on
the message (services/orchestrator/sqla_transport.py) is not renewed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from celery.result import AsyncResult

from services.orchestrator.batches import draw_indices
from services.orchestrator.celery_app import build_celery, declare_queues
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.ledger import Ledger

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TASKS = "tests.integration.celery_tasks"
N_RECORDS, SEED = 40, 7
BROKERS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
    pytest.param("rabbitmq", id="rabbitmq", marks=pytest.mark.rabbitmq),
]


class Env:
    """One isolated broker setup: a unique queue prefix, a home folder, a ledger, the sending app."""

    def __init__(self, kind: str, tmp: Path, request: pytest.FixtureRequest):
        self.kind, self.tmp = kind, tmp
        self.prefix = f"t{uuid.uuid4().hex[:8]}."
        opts: dict = {"home": str(tmp), "queue_prefix": self.prefix}
        if kind == "redis":
            url = request.getfixturevalue("redis_url")
            opts |= {"broker_url": url, "result_backend": url, "visibility_timeout_s": 4,
                     "broker_transport_options": {"global_keyprefix": self.prefix}}
        elif kind == "sqlite":
            opts["broker_transport_options"] = {"lease_s": 3}
        elif kind == "rabbitmq":
            opts["broker_url"] = request.getfixturevalue("rabbitmq_url")
        self.settings = OrchestratorSettings(**opts)
        self.vars = {f"CASCADE_ORCH_{k.upper()}": json.dumps(v) if isinstance(v, dict) else str(v)
                     for k, v in opts.items()}
        self.app = build_celery(self.settings, name="cascade-test-client")
        declare_queues(self.app)
        self.ledger = Ledger(self.settings.ledger())
        self.workers: list[subprocess.Popen] = []

    def q(self, *kinds: str) -> str:
        return ",".join(self.prefix + k for k in kinds)

    def start_worker(self, *kinds: str) -> subprocess.Popen:
        log = self.tmp / f"worker-{len(self.workers)}.log"
        cmd = [sys.executable, "-m", "celery", "-A", TASKS, "worker", "-Q", self.q(*kinds), "--pool", "prefork",
               "-c", "1", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info",
               "-n", f"w{len(self.workers)}-{self.prefix}@%h"]
        env = {**os.environ, **self.vars, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.workers.append(proc)
        deadline = time.monotonic() + 40
        while " ready." not in log.read_text():
            assert proc.poll() is None, f"worker exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"worker not ready in 40 s:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
        return proc

    def kill_worker(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def logs(self) -> str:
        return "\n".join(p.read_text()[-2000:] for p in sorted(self.tmp.glob("worker-*.log")))

    def close(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                self.kill_worker(proc)
        self.ledger.close()
        if self.kind == "rabbitmq":
            with self.app.connection_for_write() as conn:
                channel = conn.default_channel
                for queue in self.app.conf.task_queues:
                    channel.queue_delete(queue.name)
                channel.exchange_delete(self.app.conf.task_default_exchange)


@pytest.fixture(params=BROKERS)
def env(request, tmp_path):
    e = Env(request.param, tmp_path, request)
    yield e
    e.close()


def _group(proc: subprocess.Popen) -> set[int]:
    """Pids in the process group of `proc` (the worker and its pool children)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == proc.pid:
                    out.add(int(entry.name))
            except OSError:
                pass
    return out


def wait_for_marker(path: Path, timeout: float = 30) -> int:
    """The pid written into `path` by the task attempt that created it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit():
            return int(text)
        time.sleep(0.1)
    raise AssertionError(f"{path.name} never appeared")


def apply_step(env: Env, run: int, step: int, hold_s: float, markers: Path) -> AsyncResult:
    return env.app.send_task("cascade.train.apply_step", args=(run, 0, step, 4, N_RECORDS, SEED, hold_s, str(markers)))


def assert_applied_once(env: Env, run: int, step: int, attempts: int, by: int = 2) -> None:
    (rec,) = [s for s in env.ledger.steps(run) if s.step_index == step]
    assert (rec.phase, rec.attempts) == ("done", attempts), env.logs()
    assert rec.metrics == {"batch": draw_indices(N_RECORDS, SEED, 0, step, 4), "applied_by_attempt": by}


def test_routing_and_requeue_when_a_worker_child_dies(env, tmp_path):
    env.start_worker("rollout", "reward", "train", "control")
    kinds = ("rollout", "reward", "train", "control")
    results = {k: env.app.send_task(f"cascade.{k}.where") for k in kinds}
    for kind, res in results.items():
        assert res.get(timeout=20)["routing_key"] == env.prefix + kind, env.logs()
    teacher = env.app.send_task("cascade.teacher.where")  # nobody consumes `teacher` yet

    run = env.ledger.create_run("brokers", {"broker": env.kind})
    markers = tmp_path / "m0"
    markers.mkdir()
    first = apply_step(env, run, 0, hold_s=60, markers=markers)
    os.kill(wait_for_marker(markers / "attempt-1"), signal.SIGKILL)  # the pool child, mid-task
    out = first.get(timeout=30)
    assert (out["applied"], out["attempts"], out["routing_key"]) == (True, 2, env.prefix + "train"), env.logs()
    assert_applied_once(env, run, 0, attempts=2)

    again = apply_step(env, run, 0, hold_s=0, markers=markers).get(timeout=20)  # a duplicate delivery
    assert (again["applied"], again["attempts"]) == (False, 3)
    assert_applied_once(env, run, 0, attempts=3)

    assert teacher.state == "PENDING"
    env.start_worker("teacher")
    assert teacher.get(timeout=20)["routing_key"] == env.prefix + "teacher", env.logs()


@pytest.mark.parametrize("kind", BROKERS)
def test_a_killed_worker_hands_its_task_to_the_next_one(kind, tmp_path, request):
    env = Env(kind, tmp_path, request)
    try:
        worker = env.start_worker("train", "control")
        spare = env.start_worker("train", "control")  # already consuming: the handover is the broker's alone
        run = env.ledger.create_run("brokers", {"broker": env.kind})
        markers = tmp_path / "m1"
        markers.mkdir()
        res = apply_step(env, run, 1, hold_s=60, markers=markers)
        holder = wait_for_marker(markers / "attempt-1")
        victim = worker if holder in _group(worker) else spare
        killed = time.monotonic()
        env.kill_worker(victim)  # SIGKILL to the whole process group: no chance to requeue anything
        wait_for_marker(markers / "attempt-2", timeout=40)
        cost = time.monotonic() - killed
        out = res.get(timeout=30)
        assert (out["applied"], out["attempts"], out["redelivered"]) == (True, 2, True), env.logs()
        assert_applied_once(env, run, 1, attempts=2)
        print(f"\n{kind}: the killed worker's task ran again on the other worker {cost:.1f} s after the SIGKILL")
        assert cost < 20, f"{kind}: {cost:.1f} s to hand the task over"
    finally:
        env.close()


@pytest.mark.parametrize("kind", [BROKERS[0], BROKERS[1]])
def test_a_live_worker_keeps_its_task_past_the_visibility_timeout(kind, tmp_path, request):
    """The timeout that makes a killed worker cost seconds never hands a long step of a live one to another."""
    env = Env(kind, tmp_path, request)
    try:
        env.start_worker("train", "control")
        env.start_worker("train", "control")
        run = env.ledger.create_run("brokers", {"broker": env.kind})
        markers = tmp_path / "m2"
        markers.mkdir()
        out = apply_step(env, run, 2, hold_s=12, markers=markers).get(timeout=40)  # 3-4 timeouts long
        assert (out["applied"], out["attempts"]) == (True, 1), env.logs()
        assert not (markers / "attempt-2").exists(), "a live worker's task was handed to another"
        assert_applied_once(env, run, 2, attempts=1, by=1)
    finally:
        env.close()

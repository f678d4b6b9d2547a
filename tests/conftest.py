"""Shared fixtures: the tiny model and the synthetic data, built once per test session."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
from pathlib import Path

import pytest

LINGER_S = 60.0
"""How long the interpreter may take to exit after the summary before it is ended (see pytest_unconfigure)."""
_EXIT = pytest.StashKey[int]()


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT] = int(exitstatus)


def pytest_unconfigure(config):
    """A thread or an atexit hook that a test left waiting would hold the process after its summary
    until CI's clock runs out. Give it LINGER_S, then print every thread's stack (the leak to fix)
    and exit with the session's own status."""
    status = config.stash.get(_EXIT, None)
    if status is None:
        return

    def end():
        sys.stderr.write(f"\npytest had not exited {LINGER_S:.0f}s after its summary; the threads holding it:\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(status)

    timer = threading.Timer(LINGER_S, end)
    timer.daemon = True
    timer.start()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """An HF directory with the `tiny` preset (random weights, locally trained tokenizer)."""
    from services.common.tinymodel import init_model

    return init_model(tmp_path_factory.mktemp("tiny-model"), preset="tiny", seed=0)


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory) -> Path:
    """Synthetic train / validation / SFT JSONL for every domain (seed 0)."""
    from services.common.synth import write_dataset

    out = tmp_path_factory.mktemp("synth")
    write_dataset(out, seed=0)
    return out


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of a real Redis (found on 6379 or started)."""
    from tests.servers import ensure_server

    return ensure_server("redis")


@pytest.fixture(scope="session")
def rabbitmq_url() -> str:
    """URL of a real RabbitMQ (found on 5672 or started)."""
    from tests.servers import ensure_server

    return ensure_server("rabbitmq")


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """SQLAlchemy URL of a real PostgreSQL (found on 5432 or started)."""
    from tests.servers import ensure_server

    return ensure_server("postgres")

"""Find or start the real servers some tests need: Redis, RabbitMQ, PostgreSQL.

A test never skips because a server is missing. Each server is looked for on its standard
loopback port; when nothing answers, the same command the machine image uses starts it (and the
fixture waits for the port). If that is impossible the test fails with a line saying how to
install it; `.ci/run` installs the packages on a machine that lacks them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSpec:
    name: str
    port: int
    url: str
    binary: str
    start: list[str]
    package: str


def _pg_start() -> list[str]:
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    version = versions[-1] if versions else "15"
    return ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"]


SERVERS = {
    "redis": ServerSpec(
        "redis", 6379, "redis://127.0.0.1:6379/0", "redis-server",
        ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", "6379", "--save", "", "--appendonly", "no"],
        "redis-server",
    ),
    "rabbitmq": ServerSpec(
        "rabbitmq", 5672, "amqp://guest:guest@127.0.0.1:5672//", "rabbitmq-server",
        ["rabbitmq-server", "-detached"], "rabbitmq-server",
    ),
    "postgres": ServerSpec(
        "postgres", 5432, "postgresql+psycopg://postgres:postgres@127.0.0.1:5432/postgres", "pg_ctlcluster",
        _pg_start(), "postgresql",
    ),
}


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def ensure_server(name: str, wait: float = 90.0) -> str:
    """Return the URL of a running `name` server, starting it if nothing listens on its port."""
    spec = SERVERS[name]
    env_url = os.environ.get(f"CASCADE_TEST_{name.upper()}_URL")
    if env_url:
        return env_url
    if port_open(spec.port):
        return spec.url
    if shutil.which(spec.binary) is None:
        raise RuntimeError(
            f"{name} is not running on 127.0.0.1:{spec.port} and `{spec.binary}` is not installed: "
            f"install the `{spec.package}` package (or set CASCADE_TEST_{name.upper()}_URL)"
        )
    subprocess.run(spec.start, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if port_open(spec.port):
            return spec.url
        time.sleep(0.5)
    raise RuntimeError(f"started {name} with `{' '.join(spec.start)}` but port {spec.port} did not open in {wait:.0f}s")

"""Private servers for fault injection: a Redis and a PostgreSQL cluster that a test may kill -9.

Each runs on a free loopback port with its own files, never the machine's shared 6379 / 5432, so
SIGKILLing and restarting them touches nobody else. Used by tests/reliability/faults.py; this
module knows nothing about the cascade.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from services.common.supervisor import free_port
from tests.servers import port_open


class PrivateRedis:
    """redis-server on a free loopback port with its own directory (never the machine's 6379)."""

    def __init__(self, root: Path):
        self.dir = Path(root)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
                "--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        log = (self.dir / "redis.log").open("ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while not port_open(self.port):
            assert time.monotonic() < deadline and self.proc.poll() is None, "private redis did not start"
            time.sleep(0.1)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, down_seconds: float = 1.0) -> None:
        """SIGKILL the broker, leave it down a moment, start it again on the same port and files."""
        self.kill()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1


PG_MISSING = ("no PostgreSQL server binaries (initdb, postgres) on PATH, under `pg_config --bindir` or in "
              "/usr/lib/postgresql/*/bin: install the distribution's postgresql package (.ci/servers.sh does)")


def pg_bindir() -> Path | None:
    """The folder holding PostgreSQL's initdb and postgres: PATH, then `pg_config --bindir`, then
    Debian's /usr/lib/postgresql/<version>/bin, newest first (Debian keeps them off PATH)."""
    candidates = [str(Path(found).resolve().parent) for found in [shutil.which("initdb")] if found]
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True,
                         key=lambda d: [int(n) for n in re.findall(r"\d+", d)])
    return next((Path(d) for d in candidates if d and all((Path(d) / b).is_file() for b in ("initdb", "postgres"))), None)


class PrivatePostgres:
    """A throw-away PostgreSQL cluster on a free loopback port, trust auth (never the machine's 5432).

    initdb refuses to run as root, so under root the server runs as the `postgres` OS user, in a
    folder of the system temp dir that user owns (pytest's own temp dirs are closed to it).
    `restart` SIGKILLs the postmaster and starts it again on the same files: crash recovery.
    """

    def __init__(self, root: Path, bindir: Path, database: str = "cascade"):
        self.log_path = Path(root) / "postgres.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.bindir, self.database = bindir, database
        self.user = "postgres" if os.geteuid() == 0 else None
        self.dir = Path(tempfile.mkdtemp(prefix="cascade-pg-"))
        if self.user:
            shutil.chown(self.dir, self.user, self.user)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{self.database}"

    def _popen(self, argv: list[str], **kw) -> subprocess.Popen:
        log = self.log_path.open("ab")
        try:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    user=self.user, group=self.user, extra_groups=[] if self.user else None, **kw)
        finally:
            log.close()

    def start(self) -> None:
        """initdb on first start; then the server, and wait until the ledger database answers."""
        data = self.dir / "data"
        first = not data.exists()
        if first:
            initdb = self._popen([str(self.bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                                  "-E", "UTF8", "--locale=C", "--no-sync"])
            assert initdb.wait(120) == 0, f"initdb failed, see {self.log_path}"
        self.proc = self._popen([str(self.bindir / "postgres"), "-D", str(data), "-p", str(self.port),
                                 "-h", "127.0.0.1", "-k", str(self.dir)])
        self._wait_ready("postgres")
        if first:
            import psycopg

            with psycopg.connect(self._dsn("postgres"), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.database}"')

    def _dsn(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _wait_ready(self, database: str, timeout: float = 60) -> None:
        """Until a query succeeds: the port opens before crash recovery has finished."""
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self._dsn(database), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                assert time.monotonic() < deadline and self.proc.poll() is None, \
                    f"private postgres did not start, see {self.log_path}"
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the postmaster, then wait for its backends to notice and exit (else a restart is refused)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        deadline = time.monotonic() + 5
        while _group_alive(self.proc.pid) and time.monotonic() < deadline + 2:
            if time.monotonic() > deadline:  # a backend busy in a query: kill it too (zombies end the wait)
                os.killpg(self.proc.pid, signal.SIGKILL)
            time.sleep(0.05)

    def restart(self, down_seconds: float = 1.0) -> None:
        """kill -9 the server, leave it down a moment, start it on the same files and port."""
        self.kill()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True

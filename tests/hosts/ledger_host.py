"""A private PostgreSQL server on one host of a tests/hosts network: the ledger's database, bound to
that host's address only (never loopback, never the machine's 5432 outside the namespaces).

initdb refuses root, so the cluster belongs to the `postgres` OS user, in a folder of the system temp
dir that user owns; the postmaster runs inside the host as that user (setpriv), and pg_hba trusts the
hosts of this network's subnet (nothing outside the namespaces can reach it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.hosts.netns import Host, Network, wait_port
from tests.reliability.private_servers import PG_MISSING, pg_bindir

PORT = 5432
READY = """
import sys, time, psycopg
dsn = sys.argv[1]
deadline = time.monotonic() + 60
while True:
    try:
        with psycopg.connect(dsn + "/postgres", connect_timeout=2, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'cascade'").fetchone():
                conn.execute('CREATE DATABASE "cascade"')
        break
    except psycopg.OperationalError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
"""


class LedgerHost:
    def __init__(self, net: Network, host: Host, log: Path):
        bindir = pg_bindir()
        if bindir is None:
            raise RuntimeError(PG_MISSING)
        self.host, self.log = host, log
        self.user = "postgres" if os.geteuid() == 0 else None
        self.dir = Path(tempfile.mkdtemp(prefix="cascade-pg-host-"))
        if self.user:
            shutil.chown(self.dir, self.user, self.user)
        data = self.dir / "data"
        with log.open("ab") as out:
            done = subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                                   "--locale=C", "--no-sync"], stdout=out, stderr=subprocess.STDOUT, timeout=120,
                                  user=self.user, group=self.user, extra_groups=[] if self.user else None)
        assert done.returncode == 0, f"initdb failed, see {log}"
        with (data / "pg_hba.conf").open("a") as f:
            f.write(f"host all all {net.subnet}.0/24 trust\n")
        drop = ["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--clear-groups"] if self.user else []
        self.argv = [*drop, str(bindir / "postgres"), "-D", str(data), "-p", str(PORT), "-h", host.address,
                     "-k", str(self.dir), "-c", "fsync=off"]
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.host.address}:{PORT}/cascade"

    def start(self) -> None:
        self.proc = self.host.popen(self.argv, log=self.log)
        wait_port(self.host, PORT, timeout=60, proc=self.proc)
        done = self.host.run([sys.executable, "-c", READY, f"postgresql://postgres@{self.host.address}:{PORT}"], timeout=90)
        assert done.returncode == 0, f"the ledger database did not answer: {done.stderr[-800:]}"

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

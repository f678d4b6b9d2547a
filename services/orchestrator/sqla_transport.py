"""kombu's SQLAlchemy broker transport, polling faster and accepting `polling_interval`.

The embedded default broker is a SQLite file. kombu's transport polls it once a second and hands
every transport option to `create_engine`, so its interval cannot be set; a cascade step is a
chain of several tasks, and a second per hop dominated the laptop demo. This subclass polls every
`polling_interval` seconds (default 0.05) and keeps that option away from SQLAlchemy. It is
registered under the URL scheme `cascade-sqla+` (see celery_app.broker_url_for). A publish or
an acknowledgement made in this process wakes its consumer at once: the worker that finishes a
link of a step's chain takes the next link without waiting for the next poll.

A SQLite broker file also gets write-ahead logging with `synchronous=NORMAL` and a busy timeout:
kombu's default (rollback journal, full sync) costs ~30 ms of fsync per commit on a laptop disk,
and every hop of a step commits several times (publish, fetch, ack). With WAL a committed message
survives any process crash (a power loss can drop the last commits; the ledger, not the broker,
is the record of what was done, and `cascade resume` re-plans from it).
"""

from __future__ import annotations

import socket
import threading
from queue import Empty
from time import monotonic

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import sqlalchemy as sqla
from sqlalchemy import create_engine, event

SCHEME = "cascade-sqla"
DEFAULT_POLLING_INTERVAL = 0.05


_WAKE = threading.Event()
"""Set when this process publishes or acknowledges a message: its consumer polls at once instead
of sleeping out the interval (a worker runs the next link of a chain it just published itself)."""


class Channel(sqla.Channel):
    def _put(self, queue, payload, **kwargs):
        super()._put(queue, payload, **kwargs)
        _WAKE.set()

    def basic_ack(self, delivery_tag, multiple=False):
        super().basic_ack(delivery_tag, multiple=multiple)
        _WAKE.set()  # prefetch is 1: the next message can be taken only now

    def _engine_from_config(self):
        conninfo = self.connection.client
        options = {k: v for k, v in conninfo.transport_options.items() if k not in _NOT_FOR_SQLALCHEMY}
        engine = create_engine(conninfo.hostname, **options)
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
        return engine


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


_NOT_FOR_SQLALCHEMY = {
    "polling_interval", "queue_tablename", "message_tablename", "callback", "errback", "max_retries",
    "interval_start", "interval_step", "interval_max", "retry_errors",
}


class Transport(sqla.Transport):
    Channel = Channel
    polling_interval = DEFAULT_POLLING_INTERVAL

    def drain_events(self, connection, timeout=None):
        """kombu's polling loop, but the wait between empty polls ends early on a local publish/ack."""
        start = monotonic()
        interval = self.polling_interval
        if timeout and interval and interval > timeout:
            interval = timeout
        while True:
            _WAKE.clear()
            try:
                self.cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                if timeout is not None and monotonic() - start >= timeout:
                    raise socket.timeout() from None
                if interval is not None:
                    _WAKE.wait(interval)


def register() -> None:
    TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")

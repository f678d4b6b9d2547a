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

A taken message is *leased*, not lost: kombu's transport marks it invisible for ever, so a worker
SIGKILLed mid-task used to strand its task until someone typed `cascade resume`. Here each taken
message gets a row in `cascade_lease` that a thread of the taking process renews every
`lease_s / 3` seconds; a lease not renewed for `lease_s` (default 10: the process is gone) makes
the message visible again, and the next poll of any worker redelivers it (the ledger keeps that
exactly-once). An acknowledged or rejected message is deleted with its lease; messages taken before
leases existed have none and stay as they were.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from queue import Empty
from time import monotonic

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import sqlalchemy as sqla
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads
from sqlalchemy import Column, Float, MetaData, Table, create_engine, delete, event, select, text, update
from sqlalchemy.types import BigInteger

log = logging.getLogger(__name__)

SCHEME = "cascade-sqla"
DEFAULT_POLLING_INTERVAL = 0.05
DEFAULT_LEASE_S = 10.0
_LEASES = MetaData()
LEASE = Table("cascade_lease", _LEASES, Column("message_id", BigInteger, primary_key=True),
              Column("renewed_at", Float, nullable=False))


_WAKE = threading.Event()
"""Set when this process publishes or acknowledges a message: its consumer polls at once instead
of sleeping out the interval (a worker runs the next link of a chain it just published itself)."""


class _Renewer:
    """One thread per process renewing the leases of every message this process holds."""

    def __init__(self):
        self._held: dict[int, tuple[object, float]] = {}  # message id -> (engine, lease_s)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, engine, message_id: int, lease_s: float) -> None:
        with self._lock:
            self._held[message_id] = (engine, lease_s)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="broker-leases", daemon=True)
                self._thread.start()

    def release(self, message_id: int) -> None:
        with self._lock:
            self._held.pop(message_id, None)

    def _run(self) -> None:
        while True:
            with self._lock:
                held = dict(self._held)
            pause = min((lease for _e, lease in held.values()), default=DEFAULT_LEASE_S) / 3
            by_engine: dict[object, list[int]] = {}
            for mid, (engine, _lease) in held.items():
                by_engine.setdefault(engine, []).append(mid)
            for engine, ids in by_engine.items():
                try:
                    with engine.begin() as conn:
                        conn.execute(update(LEASE).where(LEASE.c.message_id.in_(ids)).values(renewed_at=time.time()))
                except Exception as exc:  # noqa: BLE001 - the broker is busy or gone; the next round retries
                    log.warning(f"could not renew broker leases: {type(exc).__name__}: {exc}")
            time.sleep(pause)


_RENEWER = _Renewer()


class Channel(sqla.Channel):
    def __init__(self, connection, **kwargs):
        super().__init__(connection, **kwargs)
        self.lease_s = float(connection.client.transport_options.get("lease_s", DEFAULT_LEASE_S))
        self._taken: dict[str, int] = {}  # delivery tag -> message id
        self._taken_lock = threading.Lock()

    def _put(self, queue, payload, **kwargs):
        super()._put(queue, payload, **kwargs)
        _WAKE.set()

    def _get(self, queue):
        """kombu's take (oldest visible message, marked invisible) plus a lease, after handing back the
        messages of this queue whose lease ran out."""
        obj = self._get_or_create(queue)
        if self.session.bind.name == "sqlite":
            self.session.execute(text("BEGIN IMMEDIATE TRANSACTION"))
        try:
            self._reclaim(obj.id)
            msg = (self.session.query(self.message_cls).with_for_update()
                   .filter(self.message_cls.queue_id == obj.id).filter(self.message_cls.visible != False)  # noqa: E712
                   .order_by(self.message_cls.sent_at).order_by(self.message_cls.id).limit(1).first())
            if not msg:
                raise Empty()
            msg.visible = False
            payload = loads(bytes_to_str(msg.payload))
            stale = self.session.execute(select(LEASE.c.message_id).where(LEASE.c.message_id == msg.id)).first()
            if stale:  # a lease that ran out: this is a redelivery
                payload.setdefault("properties", {}).setdefault("delivery_info", {})["redelivered"] = True
                payload.setdefault("headers", {})["redelivered"] = True
                self.session.execute(update(LEASE).where(LEASE.c.message_id == msg.id).values(renewed_at=time.time()))
            else:
                self.session.execute(LEASE.insert().values(message_id=msg.id, renewed_at=time.time()))
            with self._taken_lock:
                self._taken[payload["properties"]["delivery_tag"]] = msg.id
            _RENEWER.hold(self.session.bind, msg.id, self.lease_s)
            return payload
        finally:
            self.session.commit()

    def _reclaim(self, queue_id: int) -> None:
        """Make this queue's messages whose lease was not renewed for `lease_s` visible again."""
        expired = time.time() - self.lease_s
        ids = [row[0] for row in self.session.execute(
            select(LEASE.c.message_id).join(self.message_cls.__table__, self.message_cls.id == LEASE.c.message_id)
            .where(LEASE.c.renewed_at < expired, self.message_cls.queue_id == queue_id,
                   self.message_cls.visible == False))]  # noqa: E712
        if ids:
            self.session.execute(update(self.message_cls.__table__).where(self.message_cls.id.in_(ids))
                                 .values(visible=True))
            log.warning(f"broker: {len(ids)} message(s) of a worker gone for {self.lease_s:.0f} s handed back",
                        extra={"messages": ids})

    def _finish(self, delivery_tag) -> None:
        """Forget a taken message: its row and its lease (acknowledged, rejected or put back as a new row)."""
        with self._taken_lock:
            mid = self._taken.pop(delivery_tag, None)
        if mid is None:
            return
        _RENEWER.release(mid)
        engine = self.session.bind
        with engine.begin() as conn:
            conn.execute(delete(LEASE).where(LEASE.c.message_id == mid))
            conn.execute(delete(self.message_cls.__table__).where(self.message_cls.id == mid))

    def basic_ack(self, delivery_tag, multiple=False):
        super().basic_ack(delivery_tag, multiple=multiple)
        self._finish(delivery_tag)
        _WAKE.set()  # prefetch is 1: the next message can be taken only now

    def basic_reject(self, delivery_tag, requeue=False):
        super().basic_reject(delivery_tag, requeue=requeue)
        self._finish(delivery_tag)

    def _restore(self, message):
        self._finish(message.delivery_tag)
        super()._restore(message)

    def _engine_from_config(self):
        conninfo = self.connection.client
        options = {k: v for k, v in conninfo.transport_options.items() if k not in _NOT_FOR_SQLALCHEMY}
        engine = create_engine(conninfo.hostname, **options)
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
        _LEASES.create_all(engine)
        return engine


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


_NOT_FOR_SQLALCHEMY = {
    "polling_interval", "lease_s", "queue_tablename", "message_tablename", "callback", "errback", "max_retries",
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

"""Redis brokers: a worker renews the visibility of the messages it is running, so the visibility
timeout can be short (seconds) without a long step ever being handed to a second worker.

kombu's Redis transport hands an unacknowledged message to another worker once its entry in the
`unacked_index` sorted set is older than the visibility timeout. A thread of the process running a
task re-scores that entry every `visibility_timeout / 3` seconds while the task runs; when the
worker is SIGKILLed the renewals stop and the message comes back after at most the timeout.
Connected through Celery's task_received signal (the worker's main process, which holds the message
until it acknowledges it); a held tag is dropped once the channel no longer has it unacknowledged.
A no-op on other brokers.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)


class LeaseRenewer:
    """The delivery tags this process is running, re-scored in `unacked_index` until they finish."""

    def __init__(self):
        self._held: dict[str, tuple[object, object]] = {}  # delivery tag -> (Celery app, kombu channel)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, app, tag: str, channel) -> None:
        with self._lock:
            self._held[tag] = (app, channel)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="redis-leases", daemon=True)
                self._thread.start()

    def renew(self) -> int:
        """Re-score every held tag (ZADD XX: a tag already acknowledged is not re-added); returns how many."""
        with self._lock:
            for tag, (_app, channel) in list(self._held.items()):
                if tag not in getattr(channel.qos, "_delivered", {}):  # acknowledged or rejected
                    del self._held[tag]
            held = dict(self._held)
        by_app: dict[int, tuple[object, list[str]]] = {}
        for tag, (app, _channel) in held.items():
            by_app.setdefault(id(app), (app, []))[1].append(tag)
        for app, tags in by_app.values():
            with app.connection_for_write() as conn:
                channel = conn.default_channel
                channel.client.zadd(channel.unacked_index_key, {t: time.time() for t in tags}, xx=True)
        return len(held)

    def _run(self) -> None:
        while True:
            pause = 10.0
            try:
                with self._lock:
                    apps = [app for app, _channel in self._held.values()]
                if apps:
                    pause = min(float(a.conf.broker_transport_options.get("visibility_timeout", 30)) for a in apps) / 3
                self.renew()
            except Exception as exc:  # noqa: BLE001 - Redis busy or gone: the next round retries
                log.warning(f"could not renew Redis visibility: {type(exc).__name__}: {exc}")
            time.sleep(max(0.2, pause))


RENEWER = LeaseRenewer()


def _redis(app) -> bool:
    return str(app.conf.broker_url or "").startswith(("redis://", "rediss://"))


def on_received(sender=None, request=None, **_kw) -> None:
    """task_received (the worker's main process, which holds the message until it is acknowledged)."""
    message = getattr(request, "message", None)
    app = getattr(sender, "app", None)
    if message is not None and app is not None and _redis(app):
        RENEWER.hold(app, message.delivery_tag, message.channel)

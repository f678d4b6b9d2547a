"""kombu's SQLAlchemy broker transport, polling faster and accepting `polling_interval`.

The embedded default broker is a SQLite file. kombu's transport polls it once a second and hands
every transport option to `create_engine`, so its interval cannot be set; a cascade step is a
chain of several tasks, and a second per hop dominated the laptop demo. This subclass polls every
`polling_interval` seconds (default 0.05) and keeps that option away from SQLAlchemy. It is
registered under the URL scheme `cascade-sqla+` (see celery_app.broker_url_for).
"""

from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import sqlalchemy as sqla
from sqlalchemy import create_engine

SCHEME = "cascade-sqla"
DEFAULT_POLLING_INTERVAL = 0.05


class Channel(sqla.Channel):
    def _engine_from_config(self):
        conninfo = self.connection.client
        options = {k: v for k, v in conninfo.transport_options.items() if k not in _NOT_FOR_SQLALCHEMY}
        return create_engine(conninfo.hostname, **options)


_NOT_FOR_SQLALCHEMY = {
    "polling_interval", "queue_tablename", "message_tablename", "callback", "errback", "max_retries",
    "interval_start", "interval_step", "interval_max", "retry_errors",
}


class Transport(sqla.Transport):
    Channel = Channel
    polling_interval = DEFAULT_POLLING_INTERVAL


def register() -> None:
    TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")

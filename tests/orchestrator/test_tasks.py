"""Which task failures are retried: the ledger database or the broker going away is transient, a bad query is not."""

from __future__ import annotations

import sqlite3

from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from services.orchestrator.tasks import _unreachable


def test_a_refused_or_dropped_database_connection_is_retried():
    assert _unreachable(OperationalError("SELECT 1", {}, sqlite3.OperationalError("connection refused")))
    dropped = DBAPIError("SELECT 1", {}, Exception("server closed the connection"), connection_invalidated=True)
    assert _unreachable(dropped)


def test_a_broker_refusing_the_next_steps_enqueue_is_retried():
    from kombu.exceptions import OperationalError as BrokerError

    assert _unreachable(BrokerError("Error 111 connecting to 127.0.0.1:6379. Connection refused."))


def test_other_database_errors_fail_the_run():
    assert not _unreachable(ProgrammingError("SELEC 1", {}, Exception("syntax error")))
    assert not _unreachable(DBAPIError("SELECT 1", {}, Exception("value too long"), connection_invalidated=False))
    assert not _unreachable(ValueError("not a database error"))

"""Which task failures are retried: the ledger database going away is transient, a bad query is not."""

from __future__ import annotations

import sqlite3

from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from services.orchestrator.tasks import _db_unreachable


def test_a_refused_or_dropped_database_connection_is_retried():
    assert _db_unreachable(OperationalError("SELECT 1", {}, sqlite3.OperationalError("connection refused")))
    dropped = DBAPIError("SELECT 1", {}, Exception("server closed the connection"), connection_invalidated=True)
    assert _db_unreachable(dropped)


def test_other_database_errors_fail_the_run():
    assert not _db_unreachable(ProgrammingError("SELEC 1", {}, Exception("syntax error")))
    assert not _db_unreachable(DBAPIError("SELECT 1", {}, Exception("value too long"), connection_invalidated=False))
    assert not _db_unreachable(ValueError("not a database error"))

"""The pooled connection's check (common.dbcheck): a quiet, idle connection is lent with
no round trip; one the server ended, one with something to read and one left inside a
transaction get the full check, and the pool replaces what fails it. Real PostgreSQL
sessions in a real psycopg_pool; the server ends one with pg_terminate_backend."""

from __future__ import annotations

import select
import time

import psycopg
import pytest
from django.db import connection
from psycopg_pool import ConnectionPool

from common.dbcheck import pool_connection_check

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE_SECONDS = 10


@pytest.fixture
def conninfo():
    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's")
    db = connection.settings_dict
    return psycopg.conninfo.make_conninfo(dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"] or None,
                                          host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432)


@pytest.fixture
def full_checks(monkeypatch):
    """Every full check (the empty statement) the pool's check makes, as connections."""
    calls = []
    real = ConnectionPool.check_connection

    def spy(conn):
        calls.append(conn)
        real(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(spy))
    return calls


@pytest.fixture
def pool(conninfo):
    with ConnectionPool(conninfo, min_size=1, max_size=1, check=pool_connection_check,
                        kwargs={"autocommit": True}, open=True, timeout=DEADLINE_SECONDS) as pool:
        yield pool


def _backend(pool) -> int:
    with pool.connection() as conn:
        return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def _until(predicate) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not predicate():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.02)


def test_a_quiet_idle_connection_is_lent_without_a_round_trip(pool, full_checks):
    first = _backend(pool)

    assert _backend(pool) == first  # the same session, lent again
    assert _backend(pool) == first
    assert full_checks == []


def test_a_connection_the_server_ended_is_replaced_before_it_is_lent(pool, conninfo, full_checks):
    ended = _backend(pool)
    with psycopg.connect(conninfo, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", [ended]).fetchone()[0] is True
        _until(lambda: not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [ended]).fetchone())

    replacement = _backend(pool)  # no error reaches the borrower

    assert replacement != ended
    assert len(full_checks) >= 1  # the dead socket was readable, so the full check ran and failed


def test_a_connection_with_something_to_read_gets_the_full_check_and_is_lent(pool, conninfo, full_checks):
    with pool.connection() as conn:
        conn.execute("LISTEN river_dbcheck_test")
        listening, socket = conn.info.backend_pid, conn.fileno()
    with psycopg.connect(conninfo, autocommit=True) as other:
        other.execute("NOTIFY river_dbcheck_test")
    # The notification reaches the idle connection's socket on the server's time, not ours.
    readable, _, _ = select.select([socket], [], [], DEADLINE_SECONDS)
    assert readable, "the notification did not arrive"

    assert _backend(pool) == listening  # alive: the full check passed
    assert len(full_checks) == 1


def test_a_connection_not_idle_gets_the_full_check(conninfo, full_checks):
    conn = psycopg.connect(conninfo)  # not autocommit: the statement opens a transaction
    try:
        conn.execute("SELECT 1")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS

        with pytest.raises(psycopg.ProgrammingError):  # the pool would drop it, never lend it
            pool_connection_check(conn)

        assert full_checks == [conn]
    finally:
        conn.close()


def test_a_closed_connection_fails_the_check(conninfo):
    conn = psycopg.connect(conninfo, autocommit=True)
    conn.close()

    with pytest.raises(psycopg.OperationalError):
        pool_connection_check(conn)


def test_the_pool_django_builds_for_river_lends_with_this_check(full_checks):
    """River's backend (common.postgresql) gives Django's pool this check: a request or a
    run host's call borrows its connection with no empty statement first."""
    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's")
    settings_dict = connection.settings_dict
    saved_age, saved_options = settings_dict["CONN_MAX_AGE"], settings_dict["OPTIONS"]
    connection.close()
    settings_dict["CONN_MAX_AGE"] = 0
    settings_dict["OPTIONS"] = {**saved_options, "pool": {"min_size": 0, "max_size": 1, "timeout": 5}}
    try:
        assert settings_dict["ENGINE"] == "common.postgresql" and settings_dict["CONN_HEALTH_CHECKS"] is True
        assert connection.pool._check is pool_connection_check
        backends = []
        for _ in range(3):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backends.append(cursor.fetchone()[0])
            connection.close()  # back to the pool

        assert len(set(backends)) == 1
        assert full_checks == []
    finally:
        connection.close()
        connection.close_pool()
        settings_dict["CONN_MAX_AGE"], settings_dict["OPTIONS"] = saved_age, saved_options

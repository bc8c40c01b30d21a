"""The check a pooled PostgreSQL connection passes when it is borrowed, without a round
trip when the connection can show it is alive.

Django's pool checks every connection it lends with an empty statement when
``CONN_HEALTH_CHECKS`` is on: one round trip per borrow. A worker's run host borrows
a connection for each blocking call (a journal flush, a tool's lookup, an audit seal),
so that was four of a realwork turn's fifteen statements, and the web process paid one
per request.

An idle session in autocommit gets nothing from the server unless something happened
to it: the server ended it (``pg_terminate_backend``, a restart, ``idle_session_timeout``,
a pooler going away: each sends an error or closes the socket), or it sent a notice. So
a socket with nothing to read is lent as it is; one with something to read, or one that
cannot be polled, gets the full check, which raises when the session is gone and the
pool then opens a fresh one. What this does not see is a peer that vanished without a
word (a host that lost power, a dropped route): that connection fails on its first
statement instead of here, as any connection in use at that moment would.

``common.postgresql``, River's database backend, gives this check to the pool Django
builds; ``CONN_HEALTH_CHECKS`` (on) keeps saying whether lent connections are checked.
"""

from __future__ import annotations

import select


def pool_connection_check(conn) -> None:
    """psycopg_pool's ``check`` callback: return if ``conn`` may be lent, raise if not."""
    if not _quiet(conn):
        from psycopg_pool import ConnectionPool

        ConnectionPool.check_connection(conn)


def _quiet(conn) -> bool:
    """True when the connection is open, idle and its socket has nothing to read."""
    from psycopg import Error
    from psycopg.pq import TransactionStatus

    try:
        if conn.closed or conn.pgconn.transaction_status != TransactionStatus.IDLE:
            return False
        poller = select.poll()  # not select(): a busy process's descriptors pass 1024
        poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    except (Error, OSError, ValueError, TypeError):  # a closed or odd connection: the full check decides
        return False


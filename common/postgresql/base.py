"""Django's PostgreSQL backend (Django documents subclassing the built-in backends), with
one change: the connection pool, when settings turn it on, checks what it lends with
``common.dbcheck.pool_connection_check`` instead of an empty statement each time.

Django builds the pool itself and passes its own check when ``CONN_HEALTH_CHECKS`` is on,
with no option to name another, so the check is swapped on the pool Django built, before
the pool is opened (it is created closed and opened on first use). psycopg_pool's
version is pinned; tests/common/test_dbcheck.py fails if the attribute moves."""

from __future__ import annotations

from django.db.backends.postgresql import base

from common.dbcheck import pool_connection_check


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self):
        pool = super().pool
        if pool is not None and pool._check is not None and pool._check is not pool_connection_check:
            pool._check = pool_connection_check
        return pool

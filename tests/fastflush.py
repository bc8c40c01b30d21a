"""Emptying the tables after a ``transaction=True`` test, quickly, on PostgreSQL.

Django empties every table after such a test with ``flush``: one TRUNCATE of all of
them (a new file for each table and index: about 0.3 s here on a quiet machine, more
under load) and then the ``post_migrate`` signal, which re-creates the content types
and permissions the TRUNCATE removed (about 65 ms). With about 500 such tests that was
minutes of the suite. Here the same emptying is one round trip of ``DELETE FROM`` per
table (the tables of a test hold a few rows; about 10 ms) that keeps the content types
and permissions the migrations made, so nothing has to be re-created.

The result is what the tests rely on: every River table empty, sequences not reset
(Django does not reset them either), the audit tables emptied through the privileged
``audit_maintenance`` path as River's own ``flush`` does. Django's foreign keys are
checked at commit (DEFERRABLE INITIALLY DEFERRED), so the order of the DELETEs does not
matter. A River process still writing beside the test (the browser tests' server and
worker) can deadlock with the DELETEs or commit a row that points at a deleted one;
PostgreSQL then refuses the commit and the emptying is tried again. SQLite keeps
Django's flush.
"""

from __future__ import annotations

import time

from django.db import DatabaseError, connections
from django.test.testcases import TransactionTestCase

from governance.audit import audit_maintenance

KEPT_TABLES = frozenset({"django_content_type", "auth_permission"})
RETRIED_SQLSTATES = frozenset({"40P01", "23503"})  # deadlock; a foreign key a late writer broke
ATTEMPTS = 5


def _retryable(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if getattr(seen, "sqlstate", None) in RETRIED_SQLSTATES:
            return True
        seen = seen.__cause__
    return False


def tables_empty(alias: str) -> None:
    """Deletes every row of every River table of ``alias`` but the kept ones."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    tables = sorted(
        set(connection.introspection.django_table_names(only_existing=True, include_views=False)) - KEPT_TABLES
    )
    statement = "; ".join(f"DELETE FROM {quote(table)}" for table in tables)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with audit_maintenance(using=alias), connection.cursor() as cursor:
                cursor.execute(statement)
            return
        except DatabaseError as error:
            if attempt == ATTEMPTS or not _retryable(error):
                raise
            time.sleep(0.2 * attempt)


_django_fixture_teardown = TransactionTestCase._fixture_teardown


def _fixture_teardown(self) -> None:
    aliases = self._databases_names(include_mirrors=False)
    if self.available_apps is not None or self.serialized_rollback or any(
        connections[alias].vendor != "postgresql" for alias in aliases
    ):
        return _django_fixture_teardown(self)
    for alias in aliases:
        tables_empty(alias)
    return None


def install() -> None:
    """Replaces Django's emptying after ``transaction=True`` tests with :func:`tables_empty`."""
    TransactionTestCase._fixture_teardown = _fixture_teardown

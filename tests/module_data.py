"""Rows built once for a whole test module, rolled back after its last test.

A fixture that builds many rows for each of a module's tests (the admin-scoping world)
can build them once instead: inside an atomic block opened for the module, each test's
own transaction (pytest-django's ``db``) is a savepoint within it, so a test's writes
are rolled back to the module's rows, and the module's block is rolled back at the end.
Only for read-mostly modules whose tests do not change the Python objects the fixture
returns, and never for ``transaction=True`` tests (they commit, and empty every table).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction


@contextmanager
def rows_for_the_module(django_db_blocker) -> Iterator[None]:
    with django_db_blocker.unblock():
        block = transaction.atomic()
        block.__enter__()
        try:
            yield
        finally:
            transaction.set_rollback(True)
            block.__exit__(None, None, None)

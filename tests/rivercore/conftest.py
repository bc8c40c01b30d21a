"""The engine's own tests: plain Python, no database. The suite-wide session fixture
that needs the test database (tests/conftest.py closes the journal's connections
before it is dropped) is replaced here by one that needs nothing, so
``pytest tests/rivercore`` never creates a database and runs in seconds."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _journal_connections_closed():
    """No run here opens a journal connection; nothing to close."""
    yield


def pytest_collection_modifyitems(config, items):
    """A test in this folder that asks for the database belongs in the app's folder."""
    here = __file__.rsplit("/", 1)[0] + "/"
    for item in items:
        if str(item.fspath).startswith(here) and (
            item.get_closest_marker("django_db") or {"db", "transactional_db"} & set(item.fixturenames)
        ):
            raise pytest.UsageError(f"{item.nodeid} uses the database; tests/rivercore is for the engine alone")

"""The web process's connection pool: connections go back after every request, also
under ASGI, and an exhausted pool answers 503 with Retry-After, never 500.

The pool is real (psycopg_pool through Django's backend), made tiny for the test:
two connections and a half-second wait. Threads hold real connections from it.
"""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection
from django.test import AsyncClient, Client

from tenancy.services import token_issue

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                       reason="the connection pool is PostgreSQL's"),
]

POOL_SIZE = 2
HOLD_DEADLINE_SECONDS = 20


@pytest.fixture
def tiny_pool():
    """Every thread's connection to the test database now comes from one pool of two."""
    settings_dict = connection.settings_dict
    saved_age, saved_options = settings_dict["CONN_MAX_AGE"], settings_dict["OPTIONS"]
    connection.close()
    settings_dict["CONN_MAX_AGE"] = 0
    settings_dict["OPTIONS"] = {**saved_options, "pool": {"min_size": 0, "max_size": POOL_SIZE, "timeout": 0.5}}
    try:
        yield connection
    finally:
        connection.close()
        connection.close_pool()
        settings_dict["CONN_MAX_AGE"], settings_dict["OPTIONS"] = saved_age, saved_options


class Holders:
    """Threads that each take a pooled connection and keep it until released."""

    def __init__(self, count: int):
        self.release = threading.Event()
        self.holding = threading.Barrier(count + 1)
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._hold, daemon=True) for _ in range(count)]

    def _hold(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            self.holding.wait(timeout=HOLD_DEADLINE_SECONDS)
            self.release.wait(timeout=HOLD_DEADLINE_SECONDS)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            connection.close()  # back to the pool

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        self.holding.wait(timeout=HOLD_DEADLINE_SECONDS)
        return self

    def __exit__(self, *exc):
        self.release.set()
        for thread in self.threads:
            thread.join(timeout=HOLD_DEADLINE_SECONDS)
        assert not self.errors, self.errors


def test_exhausted_pool_answers_api_503_json_with_retry_after(tiny_pool, owner):
    token = token_issue(user=owner).plaintext
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    connection.close()

    with Holders(POOL_SIZE):
        busy = client.get("/api/v1/executions/")

    assert busy.status_code == 503
    assert busy["Retry-After"].isdigit() and int(busy["Retry-After"]) >= 1
    assert busy.json()["error"]["code"] == "database_busy"
    assert busy["Content-Type"].startswith("application/json")
    # Once the holders let go, the same request is served from the pool again.
    assert client.get("/api/v1/executions/").status_code == 200


def test_exhausted_pool_answers_a_page_503_with_retry_after(tiny_pool, owner):
    client = Client()
    client.force_login(owner)
    connection.close()

    with Holders(POOL_SIZE):
        busy = client.get("/")

    assert busy.status_code == 503
    assert busy["Retry-After"].isdigit()
    assert busy["Content-Type"].startswith("text/html")
    assert b"busy" in busy.content
    assert client.get("/").status_code == 200


def test_asgi_requests_return_their_connections_to_the_pool(tiny_pool, owner):
    """Under ASGI the connection is used in one thread and the request's cleanup runs
    in another; with persistent connections they were never given back. Ten times
    the pool's size in sequence only succeeds if every request returns its one."""
    client = AsyncClient()
    client.force_login(owner)
    connection.close()

    async def many() -> list[int]:
        return [(await client.get("/api/v1/executions/")).status_code for _ in range(POOL_SIZE * 10)]

    codes = async_to_sync(many)()

    assert codes == [200] * (POOL_SIZE * 10)
    stats = connection.pool.get_stats()
    assert stats.get("pool_size", 0) <= POOL_SIZE
    assert stats.get("requests_errors", 0) == 0

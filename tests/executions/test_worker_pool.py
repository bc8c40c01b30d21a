"""A Celery worker process borrows its connections from a pool (common.dbpool.worker_pool_enable,
called in ``worker_process_init``): a tool call's thread hands its connection back when it
closes it, so ten tool calls do not open ten PostgreSQL sessions. Run in a child process,
as a worker is, so the test process's own connection settings stay as they are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import os, sys, threading
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
import django
django.setup()
import psycopg
from django.db import connection
from common.dbpool import worker_pool_enable

opened = []
real_connect = psycopg.Connection.connect.__func__
psycopg.Connection.connect = classmethod(lambda cls, *a, **k: (opened.append(1), real_connect(cls, *a, **k))[1])
psycopg.connect = psycopg.Connection.connect  # the module's alias, which Django calls
enabled = worker_pool_enable() if sys.argv[1] == "pool" else False

def tool_call():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    connection.close()  # what a tool thread does when its call ends

for _ in range(10):
    thread = threading.Thread(target=tool_call)
    thread.start()
    thread.join()
print(enabled, len(opened))
"""


def _child(mode: str, **env) -> tuple[str, int]:
    import os

    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    done = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DATABASE_URL": url, "RIVER_DB_POOL_MIN_SIZE": "1", **env})
    assert done.returncode == 0, done.stderr[-2000:]
    enabled, opened = done.stdout.split()
    return enabled, int(opened)


@pytest.mark.django_db
def test_ten_tool_calls_share_the_pools_connections():
    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's")
    enabled, opened = _child("pool")
    # The pool's one kept connection, and at most one more it may open while that one
    # is still connecting when the first call asks.
    assert enabled == "True" and 1 <= opened <= 2
    assert _child("plain") == ("False", 10)  # what each tool call cost before: a session each


@pytest.mark.django_db
def test_the_worker_pool_can_be_turned_off():
    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's")
    assert _child("pool", RIVER_WORKER_DB_POOL="false") == ("False", 10)

"""Test settings: the real settings module with test-friendly environment defaults.

Only environment defaults are set here; everything else comes from
riverapp.settings, so the tests exercise the same configuration code.
"""

import os
from pathlib import Path

os.environ.setdefault("DEBUG", "true")
os.environ.setdefault("SECRET_KEY", "river-tests-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/river")
os.environ.setdefault("LOG_LEVEL", "WARNING")
# The suite's PostgreSQL data sources live on this machine (tests/datasources/fixtures.py
# reaches them through a local relay, since River's own database port is refused).
os.environ.setdefault("RIVER_DATA_SOURCE_ALLOWED_HOSTS", "127.0.0.1")
os.environ.setdefault("RIVER_AUDIT_HMAC_KEYS", "tests:cml2ZXItdGVzdHMtb25seS1hdWRpdC1obWFjLWtleSE=")


def _xdist_worker_isolated(worker: str) -> None:
    """Under pytest-xdist (``-n 2``; docs/testing.md) each worker process gets what it
    must not share with the other: pytest-django gives it a test database of its own
    (``test_<name>_gw1``); here it gets a Redis database (the configured one plus the
    worker's number, so ``gw0`` keeps it: cache keys, channel groups and broker queues
    name ids, which both databases hand out alike) and a var directory (data source files
    under workspace ids, artifacts, Prometheus' sample files). Child processes the tests
    start (servers, workers) inherit both through the environment, and the mark that
    it is done, so this settings module in a child does not shift them again."""
    from urllib.parse import urlsplit, urlunsplit

    number = int(worker.removeprefix("gw") or 0)
    for name in ("REDIS_URL", "RIVER_TEST_REDIS_URL"):
        url = os.environ.get(name)
        if url:
            parts = urlsplit(url)
            database = int(parts.path.strip("/") or 0)
            os.environ[name] = urlunsplit(parts._replace(path=f"/{(database + number) % 16}"))
    var_dir = Path(os.environ.get("RIVER_VAR_DIR") or Path(__file__).resolve().parent.parent / "var") / "xdist" / worker
    os.environ["RIVER_VAR_DIR"] = str(var_dir)
    # The controller process set it to the shared directory before the workers started.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(var_dir / "metrics")
    os.environ["RIVER_XDIST_ISOLATED"] = worker


_xdist_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _xdist_worker and os.environ.get("RIVER_XDIST_ISOLATED") != _xdist_worker:
    _xdist_worker_isolated(_xdist_worker)

from riverapp.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"

if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    # The test database is a file beside the configured one, as River runs on SQLite: WAL,
    # a busy timeout, and every thread (the engine's tool threads, the write-behind
    # journal) on a connection of its own. Django's default, a shared-cache in-memory
    # database, locks whole tables and fails a second writer at once with "database
    # table is locked" instead of waiting for it.
    _sqlite_file = Path(DATABASES["default"]["NAME"])  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(_sqlite_file.with_name(f"test_{_sqlite_file.name}"))}  # noqa: F405

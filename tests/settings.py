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

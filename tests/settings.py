"""Test settings: the real settings module with test-friendly environment defaults.

Only environment defaults are set here; everything else comes from
riverapp.settings, so the tests exercise the same configuration code.
"""

import os

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

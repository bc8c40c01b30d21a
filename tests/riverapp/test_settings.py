import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _check(env_overrides: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE"}}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_refuses_to_start_without_secret_key_in_production():
    result = _check({"DEBUG": "false", "ALLOWED_HOSTS": "example.com"})
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_starts_with_secret_key_and_debug_off():
    result = _check({"DEBUG": "false", "SECRET_KEY": "x" * 60, "ALLOWED_HOSTS": "example.com"})
    assert result.returncode == 0, result.stderr


def test_database_url_prepare_threshold_defaults_and_parses():
    from riverapp.env import database_from_url

    base = "postgres://river@db.example:5432/river"
    assert database_from_url("DATABASE_URL", base)["OPTIONS"]["prepare_threshold"] == 5
    assert database_from_url("DATABASE_URL", base + "?prepare_threshold=none")["OPTIONS"]["prepare_threshold"] is None
    options = database_from_url("DATABASE_URL", base + "?prepare_threshold=2&sslmode=require")["OPTIONS"]
    assert options == {"prepare_threshold": 2, "sslmode": "require"}


@pytest.mark.parametrize(("env", "message"), [
    ({"DEBUG": "maybe"}, "DEBUG must be a boolean"),
    ({"DEBUG": "true", "DATABASE_URL": "mysql://x/y"}, "DATABASE_URL must start with"),
    ({"DEBUG": "true", "DATABASE_URL": "postgres://river@127.0.0.1/river?prepare_threshold=often"},
     "DATABASE_URL: prepare_threshold must be a whole number or 'none'"),
    ({"DEBUG": "true", "RIVER_JOURNAL_WRITE_BEHIND": "sometimes"}, "RIVER_JOURNAL_WRITE_BEHIND must be a boolean"),
    ({"DEBUG": "true", "RIVER_MAX_REQUEST_BYTES": "2MB"}, "RIVER_MAX_REQUEST_BYTES must be an integer"),
    ({"DEBUG": "true", "RIVER_JSON_MAX_DEPTH": "1"}, "RIVER_JSON_MAX_DEPTH must be at least 2"),
    ({"DEBUG": "true", "RIVER_QUERY_PARAM_MAX_LENGTH": "lots"}, "RIVER_QUERY_PARAM_MAX_LENGTH must be an integer"),
], ids=["boolean", "database_url", "prepare_threshold", "journal_write_behind", "max_request_bytes",
        "json_max_depth", "query_param_max_length"])
def test_a_bad_value_stops_startup_naming_the_variable(env, message):
    result = _check(env)
    assert result.returncode != 0
    assert message in result.stderr

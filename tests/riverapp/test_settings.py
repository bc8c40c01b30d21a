import json
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


def test_refuses_to_start_without_an_audit_key_in_production():
    result = _check({"DEBUG": "false", "SECRET_KEY": "x" * 60, "ALLOWED_HOSTS": "example.com",
                     "RIVER_AUDIT_HMAC_KEYS": ""})
    assert result.returncode != 0
    assert "RIVER_AUDIT_HMAC_KEYS is not set" in result.stderr


def test_audit_keys_parse_in_order_and_errors_never_show_the_secret(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from riverapp.env import env_hmac_keys

    first, second = "A" * 44, "B" * 44  # 33 bytes each once decoded
    monkeypatch.setenv("RIVER_AUDIT_HMAC_KEYS", f" new:{first} , old:{second}")
    keys = env_hmac_keys("RIVER_AUDIT_HMAC_KEYS")
    assert list(keys) == ["new", "old"] and all(len(secret) == 33 for secret in keys.values())
    monkeypatch.setenv("RIVER_AUDIT_HMAC_KEYS", f"new:{first},new:{second}")
    with pytest.raises(ImproperlyConfigured, match="appears twice") as caught:
        env_hmac_keys("RIVER_AUDIT_HMAC_KEYS")
    assert second not in str(caught.value)
    monkeypatch.setenv("RIVER_AUDIT_HMAC_KEYS", "k1:secret-that-is-not-base64!!")
    with pytest.raises(ImproperlyConfigured) as caught:
        env_hmac_keys("RIVER_AUDIT_HMAC_KEYS")
    assert "secret-that" not in str(caught.value)


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
    ({"DEBUG": "true", "RIVER_DB_POOL_MAX_SIZE": "0"}, "RIVER_DB_POOL_MAX_SIZE must be at least 1"),
    ({"DEBUG": "true", "RIVER_DB_POOL_TIMEOUT_SECONDS": "soon"}, "RIVER_DB_POOL_TIMEOUT_SECONDS must be an integer"),
    ({"DEBUG": "true", "RIVER_DB_POOL_MIN_SIZE": "8", "RIVER_DB_POOL_MAX_SIZE": "4"},
     "RIVER_DB_POOL_MIN_SIZE (8) must not exceed RIVER_DB_POOL_MAX_SIZE (4)"),
    ({"DEBUG": "true", "RIVER_DATA_SOURCE_ALLOWED_HOSTS": "public,db/x"},
     "RIVER_DATA_SOURCE_ALLOWED_HOSTS entries must be"),
    ({"DEBUG": "true", "RIVER_AUDIT_HMAC_KEYS": "no-colon"}, "RIVER_AUDIT_HMAC_KEYS: entry 1 must look like"),
    ({"DEBUG": "true", "RIVER_AUDIT_HMAC_KEYS": "k1:not base64!"}, "RIVER_AUDIT_HMAC_KEYS: the secret of key 'k1'"),
    ({"DEBUG": "true", "RIVER_AUDIT_HMAC_KEYS": "k1:c2hvcnQ="}, "must decode to at least 32 bytes"),
    ({"DEBUG": "true", "RIVER_AUDIT_ANCHOR_SECONDS": "1"}, "RIVER_AUDIT_ANCHOR_SECONDS must be at least 10"),
    ({"DEBUG": "true", "RIVER_APPROVER_PASSWORD": "short"}, "RIVER_APPROVER_PASSWORD must be at least 12 characters"),
    ({"DEBUG": "true", "RIVER_WATCHDOG_GRACE_SECONDS": "0"}, "RIVER_WATCHDOG_GRACE_SECONDS must be at least 1"),
    ({"DEBUG": "true", "RIVER_MAX_REQUEST_BYTES": "2MB"}, "RIVER_MAX_REQUEST_BYTES must be an integer"),
    ({"DEBUG": "true", "RIVER_JSON_MAX_DEPTH": "1"}, "RIVER_JSON_MAX_DEPTH must be at least 2"),
    ({"DEBUG": "true", "RIVER_QUERY_PARAM_MAX_LENGTH": "lots"}, "RIVER_QUERY_PARAM_MAX_LENGTH must be an integer"),
    ({"DEBUG": "true", "RIVER_RUNS_PER_PROCESS": "0"}, "RIVER_RUNS_PER_PROCESS must be at least 1"),
    ({"DEBUG": "true", "RIVER_RUN_HOST_GRACE_SECONDS": "-1"}, "RIVER_RUN_HOST_GRACE_SECONDS must be at least 0"),
    ({"DEBUG": "true", "REDIS_URL": "redis://127.0.0.1:6379/0", "RIVER_BROKER_URL": "kafka://127.0.0.1:9092"},
     "RIVER_BROKER_URL must start with redis://, rediss://, amqp:// or amqps://"),
    ({"DEBUG": "true", "REDIS_URL": "", "RIVER_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//"},
     "RIVER_BROKER_URL is set but REDIS_URL is not"),
    ({"DEBUG": "true", "RIVER_PROVIDER_HEALTH_FLUSH_SECONDS": "nan"},
     "RIVER_PROVIDER_HEALTH_FLUSH_SECONDS must be between 0 and 60"),
    ({"DEBUG": "true", "RIVER_PROVIDER_HEALTH_FLUSH_SECONDS": "often"},
     "RIVER_PROVIDER_HEALTH_FLUSH_SECONDS must be a number"),
    ({"DEBUG": "true", "RIVER_WORKER_DB_POOL": "maybe"}, "RIVER_WORKER_DB_POOL must be a boolean"),
    ({"DEBUG": "true", "RIVER_MAX_DELEGATION_DEPTH": "-1"}, "RIVER_MAX_DELEGATION_DEPTH must be at least 0"),
    ({"DEBUG": "true", "RIVER_MAX_DELEGATION_DEPTH": "deep"}, "RIVER_MAX_DELEGATION_DEPTH must be an integer"),
    ({"DEBUG": "true", "RIVER_MAX_DELEGATIONS_PER_RUN": "0"}, "RIVER_MAX_DELEGATIONS_PER_RUN must be at least 1"),
], ids=["boolean", "database_url", "prepare_threshold", "journal_write_behind", "pool_max_size", "pool_timeout",
        "pool_min_over_max", "data_source_allowed_hosts", "audit_key_shape", "audit_key_base64",
        "audit_key_length", "audit_anchor_seconds", "approver_password", "watchdog_grace", "max_request_bytes",
        "json_max_depth", "query_param_max_length", "runs_per_process", "run_host_grace", "broker_scheme",
        "broker_without_redis", "health_flush_nan", "health_flush_text", "worker_pool",
        "delegation_depth_negative", "delegation_depth_text", "delegations_per_run"])
def test_a_bad_value_stops_startup_naming_the_variable(env, message):
    result = _check(env)
    assert result.returncode != 0
    assert message in result.stderr


def test_web_process_borrows_from_a_pool_and_other_processes_keep_their_connection():
    """riverapp/asgi.py and runriver set RIVER_DB_POOL; the pool then replaces
    persistent connections (the two exclude each other). Celery worker processes turn
    it on after they fork (tests/executions/test_worker_pool.py)."""
    script = (
        "import django, json; django.setup(); from django.conf import settings; "
        "db = settings.DATABASES['default']; "
        "print(json.dumps({'age': db['CONN_MAX_AGE'], 'pool': db['OPTIONS'].get('pool')}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update({"DEBUG": "true", "DJANGO_SETTINGS_MODULE": "riverapp.settings",
                "DATABASE_URL": "postgres://river@127.0.0.1:5432/river", "RIVER_DB_POOL": "true",
                "RIVER_DB_POOL_MAX_SIZE": "7", "RIVER_DB_POOL_TIMEOUT_SECONDS": "3"})
    web = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    env["RIVER_DB_POOL"] = "false"
    worker = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)

    assert web.returncode == 0, web.stderr
    assert json.loads(web.stdout.splitlines()[-1]) == {"age": 0, "pool": {"min_size": 1, "max_size": 7, "timeout": 3}}
    assert json.loads(worker.stdout.splitlines()[-1]) == {"age": 60, "pool": None}


def test_behind_a_transaction_pooler_river_uses_no_server_side_cursors_and_no_prepared_statements():
    from riverapp.env import database_behind_transaction_pooler, database_from_url

    entry = database_from_url("DATABASE_URL", "postgres://river@127.0.0.1:6432/river?prepare_threshold=5")
    pooled = database_behind_transaction_pooler(entry)
    assert pooled["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert pooled["OPTIONS"]["prepare_threshold"] is None
    assert entry["OPTIONS"]["prepare_threshold"] == 5  # the entry it was given is left as it was
    sqlite = database_from_url("DATABASE_URL", "sqlite:////tmp/river.sqlite3")
    assert database_behind_transaction_pooler(sqlite) == sqlite


def test_the_openapi_enums_are_named_without_collisions():
    """Every choice set in the OpenAPI document has a name River chose or one that could
    not collide: drf-spectacular warns (W001, W002) when two sets share a field name and
    it falls back to a hash suffix, or when an override cannot load; none is silenced."""
    import re

    from django.conf import settings
    from drf_spectacular.checks import schema_check
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator

    assert "drf_spectacular.W001" not in settings.SILENCED_SYSTEM_CHECKS
    GENERATOR_STATS.reset()
    assert [(m.id, m.msg) for m in schema_check(None)] == []
    names = set(SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"])
    assert [name for name in names if re.search(r"[0-9a-f]{3}Enum$", name)] == []
    assert {"PolicyEnforcementEnum", "PolicyTypeEnum", "ToolServerTransportEnum", "JobStatusEnum"} <= names

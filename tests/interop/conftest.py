"""River served for real for the MCP and A2A clients: ``manage.py runriver`` on a port of
127.0.0.1, on a PostgreSQL database of its own (this run's database name with
``_interop`` appended, created and dropped here) and the test's Redis, with the demo
seeded (the Support Analyst answers from its support database; the L1 Support Specialist's
write waits for approval). The people and credentials the tests use are made inside the
server's database by ``manage.py shell`` before it starts; the tests then talk to it only
over HTTP, with the SDKs' own clients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import pytest

from tests.runriver import runriver_running

ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE_SECONDS = 120

SETUP_SCRIPT = """
import json
from django.contrib.auth import get_user_model
from agents.models import Agent, AgentVersion
from tenancy.models import Membership, Organization, Workspace
from tenancy.services import token_issue
from triggers.apikeys import api_key_issue

User = get_user_model()
admin = User.objects.get(username="admin")
support = Agent.objects.get(name="Support Analyst").workspace
org = Organization.objects.create(name="Elsewhere Org", slug="elsewhere-org")
elsewhere = Workspace.objects.create(organization=org, name="Elsewhere", slug="elsewhere")
stranger = User.objects.create_user("stranger")
Membership.objects.create(workspace=elsewhere, user=stranger, role="admin")
theirs = Agent.objects.create(workspace=elsewhere, name="Secret Ledger Agent", business_function="data_analyst",
                              owner=stranger, status="active")
version = AgentVersion.objects.create(agent=theirs, version=1, goal="Their goal.", instructions="Their rules.",
                                      action_level="read_only")
theirs.current_version = version
theirs.save(update_fields=["current_version"])
viewer = User.objects.create_user("viewer")
Membership.objects.create(workspace=support, user=viewer, role="viewer")
print("SETUP " + json.dumps({
    "admin": token_issue(user=admin, name="mcp").plaintext,
    "stranger": token_issue(user=stranger, name="mcp").plaintext,
    "viewer": token_issue(user=viewer, name="mcp").plaintext,
    "admin_key": api_key_issue(created_by=admin, name="mcp key", workspace=support).plaintext,
    "tight_key": api_key_issue(created_by=admin, name="tight", workspace=support,
                               rate_limit_per_minute=3).plaintext,
    "approver": token_issue(user=User.objects.get(username="approver"), name="mcp").plaintext,
    "their_agent": str(theirs.pk),
}))
"""


@dataclass(frozen=True)
class LiveRiver:
    url: str
    credentials: dict
    env: dict

    def bearer(self, who: str) -> dict:
        return {"Authorization": f"Bearer {self.credentials[who]}"}

    def tickets_topped_up(self) -> None:
        """``seed_demo`` beside the running server: fresh open high-priority tickets, so
        the specialist's close request finds rows to change (and pauses) again."""
        _manage(self.env, "seed_demo")


def _manage(env: dict, *args: str) -> str:
    result = subprocess.run(  # noqa: S603 - our interpreter, our arguments
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _postgres(database_url: str, sql: str) -> None:
    import psycopg

    maintenance = urlunparse(urlparse(database_url)._replace(path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as connection:
        connection.execute(sql)


def _interop_redis_url(suite_url: str) -> str:
    """A Redis database of the live River's own: 13 minus the suite's (13 and 12 under
    two workers; the browser stack takes 15 and 14, the benchmark's smoke 10). On the
    suite's own database its embedded worker and the other tests could take or purge each
    other's queued tasks: the likely cause of interop runs seen once staying queued for
    the whole 60 s wait."""
    parsed = urlparse(suite_url)
    suite_db = int((parsed.path or "/0").strip("/") or 0)
    return urlunparse(parsed._replace(path=f"/{(13 - suite_db) % 16}"))


@pytest.fixture(scope="package")
def live_river(tmp_path_factory):
    """One live River for the interop package's tests, stopped after the last of them
    (the scheduler keeps the package's tests together in one worker, in a row)."""
    base_url = os.environ.get("DATABASE_URL", "")
    tmp = tmp_path_factory.mktemp("interop")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RIVER_", "DATABASE_", "PYTEST_")) and key not in {"DJANGO_SETTINGS_MODULE"}
    }
    postgres = base_url.startswith("postgres")
    if postgres:
        name = f"{urlparse(base_url).path.lstrip('/') or 'river'}_interop"
        database_url = urlunparse(urlparse(base_url)._replace(path=f"/{name}"))
        _postgres(base_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        _postgres(base_url, f'CREATE DATABASE "{name}"')
    else:
        database_url = f"sqlite:///{tmp / 'river.sqlite3'}"
    redis = os.environ.get("RIVER_TEST_REDIS_URL") or ""
    if redis:
        import redis as redis_client

        env["REDIS_URL"] = _interop_redis_url(redis)
        redis_client.Redis.from_url(env["REDIS_URL"]).flushdb()
    else:
        env.pop("REDIS_URL", None)
    env.update(
        DEBUG="true",
        DATABASE_URL=database_url,
        RIVER_VAR_DIR=str(tmp),
        LOG_LEVEL="WARNING",
        RIVER_ADMIN_PASSWORD="interop-admin-password",
        RIVER_APPROVER_PASSWORD="interop-approver-password",
        RIVER_INTEROP_WAIT_SECONDS="60",
        PYTHONUNBUFFERED="1",
    )
    _manage(env, "migrate", "--no-input", "-v", "0")
    _manage(env, "seed_demo")
    out = _manage(env, "shell", "-c", SETUP_SCRIPT)
    credentials = json.loads(next(line for line in out.splitlines() if line.startswith("SETUP "))[6:])
    log_path = tmp / "server.log"
    try:
        with runriver_running(env=env, log_path=log_path, deadline_seconds=START_DEADLINE_SECONDS) as port:
            yield LiveRiver(url=f"http://127.0.0.1:{port}", credentials=credentials, env=env)
    finally:
        if os.environ.get("RIVER_INTEROP_KEEP_LOG"):
            print(log_path.read_text())
        if postgres:
            _postgres(base_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

"""The real single-process server: `manage.py runriver` on SQLite with the embedded
broker and channel layer, driven from outside over HTTP and WebSocket."""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE_SECONDS = 90
STOP_DEADLINE_SECONDS = 45

pytestmark = pytest.mark.slow

# Runs inside the server's database before it starts: one run in the demo
# workspace (with a stored event) and one in another organization's workspace.
FIXTURE_SCRIPT = """
from django.contrib.auth import get_user_model
from agents.models import Agent, AgentVersion
from executions.models import Execution, ExecutionEvent
from tenancy.models import Membership, Organization, Workspace

analyst = Agent.objects.get(name="Support Analyst")
own = Execution.objects.create(
    workspace=analyst.workspace, agent=analyst, agent_version=analyst.current_version,
    requested_by=analyst.owner, status="completed",
)
ExecutionEvent.objects.create(execution=own, seq=1, event_type="run_started", payload={"trigger_type": "manual"})
ExecutionEvent.objects.create(execution=own, seq=2, event_type="run_completed", payload={"status": "completed"})

org = Organization.objects.create(name="Other Org", slug="other-org")
elsewhere = Workspace.objects.create(organization=org, name="Elsewhere", slug="elsewhere")
stranger = get_user_model().objects.create_user("stranger")
Membership.objects.create(workspace=elsewhere, user=stranger, role="admin")
theirs = Agent.objects.create(
    workspace=elsewhere, name="Theirs", business_function="data_analyst", owner=stranger, status="active"
)
version = AgentVersion.objects.create(
    agent=theirs, version=1, goal="Their goal.", instructions="Their rules.", action_level="read_only"
)
other = Execution.objects.create(workspace=elsewhere, agent=theirs, agent_version=version, requested_by=stranger)
print("IDS", own.pk, other.pk, elsewhere.pk)
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _manage(env: dict, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runriver")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REDIS_", "RIVER_", "DATABASE_")) and key not in {"DJANGO_SETTINGS_MODULE", "SECRET_KEY"}
    }
    env.update(
        DEBUG="true",
        DATABASE_URL=f"sqlite:///{tmp / 'river.sqlite3'}",
        RIVER_VAR_DIR=str(tmp),
        RIVER_ADMIN_PASSWORD="server-test-password",
        LOG_LEVEL="WARNING",
    )
    _manage(env, "migrate", "--no-input", "-v", "0")
    _manage(env, "seed_demo")
    ids = next(line for line in _manage(env, "shell", "-c", FIXTURE_SCRIPT).splitlines() if line.startswith("IDS "))
    own_run, other_run, other_workspace = (int(part) for part in ids.split()[1:])
    token = _manage(env, "issue_token", "admin").strip().splitlines()[-1]

    port = _free_port()
    log = (tmp / "server.log").open("w+")
    process = subprocess.Popen(  # noqa: S603 - our interpreter, our arguments
        [sys.executable, "manage.py", "runriver", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"127.0.0.1:{port}"
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while True:
        assert process.poll() is None, f"runriver exited early:\n{(tmp / 'server.log').read_text()}"
        try:
            if _get(f"http://{base}/health")[0] == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, (
            f"no /health within {START_DEADLINE_SECONDS}s:\n{(tmp / 'server.log').read_text()}"
        )
        time.sleep(0.2)

    info = {
        "process": process,
        "base": base,
        "token": token,
        "own_run": own_run,
        "other_run": other_run,
        "other_workspace": other_workspace,
        "log": tmp / "server.log",
    }
    yield info
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)
    log.close()


def _refused(url: str, subprotocols: list[str]) -> int:
    with pytest.raises(InvalidStatus) as refused:
        with connect(url, subprotocols=subprotocols, open_timeout=10):
            pass
    return refused.value.response.status_code


def test_server_is_ready_with_embedded_broker_and_channel_layer(server):
    status, body = _get(f"http://{server['base']}/health/ready")
    assert status == 200, body
    assert body["checks"] == {"database": "ok", "broker": "ok", "channel_layer": "ok"}
    assert "River is running at http://127.0.0.1:" in server["log"].read_text()


def test_authenticated_websocket_selects_bearer(server):
    with connect(
        f"ws://{server['base']}/ws/workspace/", subprotocols=["bearer", server["token"]], open_timeout=10
    ) as ws:
        assert ws.subprotocol == "bearer"


def test_run_socket_replays_the_stored_events(server):
    url = f"ws://{server['base']}/ws/executions/{server['own_run']}/?after=1"
    with connect(url, subprotocols=["bearer", server["token"]], open_timeout=10) as ws:
        assert ws.subprotocol == "bearer"
        event = json.loads(ws.recv(timeout=10))
    created_at = event.pop("created_at")
    assert event == {"type": "run_completed", "seq": 2, "execution_id": server["own_run"], "status": "completed"}
    assert datetime.datetime.fromisoformat(created_at).tzinfo is not None  # the stored time, ISO 8601


def test_bad_token_is_refused(server):
    assert _refused(f"ws://{server['base']}/ws/workspace/", ["bearer", server["token"] + "x"]) == 403


def test_another_workspaces_run_and_feed_are_refused(server):
    token = server["token"]
    assert _refused(f"ws://{server['base']}/ws/executions/{server['other_run']}/", ["bearer", token]) == 403
    assert (
        _refused(f"ws://{server['base']}/ws/workspace/?workspace={server['other_workspace']}", ["bearer", token]) == 403
    )


# Keep this test last in the file: pytest runs a module's tests in order, and the
# ones above need the server running.
def test_sigterm_stops_the_server(server):
    process = server["process"]
    process.send_signal(signal.SIGTERM)
    try:
        returncode = process.wait(timeout=STOP_DEADLINE_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"runriver still running {STOP_DEADLINE_SECONDS}s after SIGTERM")
    assert returncode == 0, server["log"].read_text()
    assert "River stopped." in server["log"].read_text()

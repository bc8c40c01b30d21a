"""The ``startup`` section of ``make bench``: River as ``make run`` starts it, from nothing.

In a scratch directory (its own SQLite database, nothing shared with the bench's
PostgreSQL), it migrates, seeds the demo workspace, starts ``manage.py runriver`` (one
process: web, in-memory broker, worker threads) and times how long until it answers, then
asks for a run over HTTP with an API token and times until the run has started and
settled: ended, or paused for a person (the demo's first run asks the user a question).
The run uses the offline planner, as ``make run`` does."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from benchmarks.verdict import verdict
from executions.models import Execution

TARGET_FIRST_RUN_START_SECONDS = 1.0
# Where the first run rests: ended, or paused for a person (the demo's first run asks the
# user a question, awaiting_interaction), since then no worker holds it any more.
SETTLED = Execution.TERMINAL | Execution.PAUSED
DEADLINE_SECONDS = 120.0

_ISSUE_SCRIPT = """
import django, json
django.setup()
from agents.models import Agent
from django.contrib.auth import get_user_model
from tenancy.services import token_issue
admin = get_user_model().objects.get(username="admin")
agent = Agent.objects.filter(workspace__memberships__user=admin, status="active").order_by("created_at").first()
print(json.dumps({"token": token_issue(user=admin, name="bench").plaintext, "agent": str(agent.pk)}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _manage(env: dict, *args: str) -> str:
    done = subprocess.run(  # noqa: S603 - this interpreter and River's own manage.py, fixed arguments
        [sys.executable, "manage.py", *args], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True,
        timeout=DEADLINE_SECONDS)
    if done.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout


def _request(port: int, method: str, path: str, token: str | None = None, body: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _until(predicate, what: str):
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise RuntimeError(f"timed out waiting for {what}")


def _answers(port: int) -> bool:
    try:
        return _request(port, "GET", "/health")[0] == 200
    except OSError:
        return False


def _run_state(port: int, token: str, execution_id: int) -> dict | None:
    status, body = _request(port, "GET", f"/api/v1/executions/{execution_id}/", token)
    return json.loads(body) if status == 200 else None


def startup_bench() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="river-bench-startup-") as scratch:
        env = {key: value for key, value in os.environ.items()
               if key not in {"DATABASE_URL", "REDIS_URL", "RIVER_BROKER_URL", "DJANGO_SETTINGS_MODULE"}}
        env.update(DEBUG="true", DATABASE_URL=f"sqlite:///{Path(scratch) / 'river.sqlite3'}",
                   RIVER_SQLITE_DATA_DIR=str(Path(scratch) / "sqlite"), RIVER_VAR_DIR=scratch)
        _manage(env, "migrate", "--no-input", "-v0")
        _manage(env, "seed_demo")
        issued = json.loads(_manage(env, "shell", "-c", _ISSUE_SCRIPT).strip().splitlines()[-1])
        port = _free_port()
        started = time.monotonic()
        server = subprocess.Popen(  # noqa: S603 - this interpreter and River's own manage.py, fixed arguments
            [sys.executable, "manage.py", "runriver", "--port", str(port)], cwd=settings.BASE_DIR, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _until(lambda: _answers(port) or server.poll() is not None, "runriver to answer")
            if server.poll() is not None:
                raise RuntimeError(f"runriver exited: {server.stderr.read().decode(errors='replace')[-2000:]}")
            ready = time.monotonic() - started
            asked = time.monotonic()
            status, body = _request(port, "POST", f"/api/v1/agents/{issued['agent']}/run", issued["token"],
                                    {"input_prompt": "How are we doing this week?"})
            if status != 202:
                raise RuntimeError(f"the run was refused: {status} {body[:300]!r}")
            execution_id = json.loads(body)["execution_id"]
            run = _until(lambda: (r := _run_state(port, issued["token"], execution_id)) and r.get("started_at") and r,
                         "the first run to start")
            seen_started = time.monotonic() - asked
            done = _until(lambda: (r := _run_state(port, issued["token"], execution_id))
                          and r["status"] in SETTLED and r, "the first run to settle (end or pause)")
            finished = time.monotonic() - asked
        finally:
            server.terminate()
            server.wait(timeout=30)
    yield "Startup, as `make run` starts River (SQLite, in-memory broker, one process, offline planner):"
    yield f"  runriver answers {ready:.2f} s after it is started (migrated and seeded beforehand)"
    settled = "ended" if done["status"] in Execution.TERMINAL else "paused"
    yield (f"  first run: the client sees it started {seen_started * 1000:.0f} ms after its request; it {settled} "
           f"{done['status']} {finished:.2f} s after the request (queued {run.get('queued_at')}, "
           f"started {run.get('started_at')})")
    judged = verdict(seen_started <= TARGET_FIRST_RUN_START_SECONDS)
    yield (f"  {judged}  first run started <= {TARGET_FIRST_RUN_START_SECONDS:g} s after the request: "
           f"{seen_started:.2f} s")

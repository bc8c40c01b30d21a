"""The embedded section of ``make bench``: runs in flight in ``make run``'s single process.

``manage.py runriver`` (Daphne, the embedded Celery worker and beat in one process, the
in-memory broker) serves a fresh SQLite file, or the PostgreSQL database named by
``database_url`` (dropped and created afresh). Runs of an agent with ``get_workspace_info`` are created over HTTP at
once; each turn's model call waits ``model_seconds`` at the fake model of
``tests/fakes`` (a call of the tool until the last turn, then an answer). A sampler
reads, every 0.1 s, how many are running at once. The figures: the time until all have
ended, the peak in flight (target: all of them, ``TARGET_IN_FLIGHT`` at full size) and
the process's CPU per turn. ``tests/riverapp/test_embedded_runs.py`` runs it too.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.verdict import verdict

ROOT = Path(__file__).resolve().parent.parent
TOOL = "get_workspace_info"
TARGET_IN_FLIGHT = 200

SEED = """
import json
from django.contrib.auth import get_user_model
from agents.models import Agent, AgentVersion
from tenancy.models import Membership, Organization, Workspace
from tenancy.permissions import Role
from tenancy.services import token_issue
org = Organization.objects.create(slug="embedded-bench", name="Embedded bench")
workspace = Workspace.objects.create(organization=org, slug="embedded-bench", name="Embedded bench")
user = get_user_model().objects.create(username="embedded-bench")
Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
agent = Agent.objects.create(workspace=workspace, name="Waiting agent", business_function="operations",
                             domain="Benchmark", owner=user, status=Agent.Status.ACTIVE)
agent.current_version = AgentVersion.objects.create(
    agent=agent, version=1, goal="Look, then answer.", instructions="Read the workspace, then answer.",
    action_level="automated", model_config={"max_turns": 20}, tools=["get_workspace_info"],
    approval_rules={"require_approval_for": [], "approver_roles": ["admin"], "auto_approve_conditions": [],
                    "escalation_timeout_minutes": 60})
agent.save(update_fields=["current_version"])
print(json.dumps({"agent": str(agent.pk), "token": token_issue(user=user, name="bench").plaintext}))
"""


@dataclass
class EmbeddedResult:
    runs: int
    statuses: Counter = field(default_factory=Counter)
    created_in: float = 0.0
    all_ended_in: float = 0.0  # from the first creation to the last run's end
    peak_running: int = 0
    cpu_seconds: float = 0.0  # of the runriver process, while the runs ran
    turns: int = 0
    database: str = "sqlite"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cpu(pid: int) -> float:
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def _model(seconds: float, turns: int):
    from tests.executions.durable_support import completion_text, completion_tool_call
    from tests.fakes.openai_server import FakeOpenAI, Scripted

    def reply(body: dict) -> Scripted:
        turn = 1 + sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        message = (completion_tool_call(TOOL, {}, f"call_{turn}") if turn < turns
                   else completion_text(f"Answered after {turn} turns."))
        return Scripted(message=message, delay=seconds)

    return FakeOpenAI(model="embedded-bench").respond_with(reply)


class _Counts:
    """The runs' statuses, read from River's database by a connection of this process."""

    def __init__(self, database_url: str | None, sqlite_path: Path):
        self.url, self.sqlite_path = database_url, sqlite_path

    @contextlib.contextmanager
    def open(self):
        if self.url:
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as conn:
                yield lambda sql: conn.execute(sql).fetchall()
        else:
            conn = sqlite3.connect(f"file:{self.sqlite_path}?mode=ro", uri=True, timeout=30)
            try:
                yield lambda sql: conn.execute(sql).fetchall()
            finally:
                conn.close()


def embedded_runs(*, runs: int, model_seconds: float, turns: int, database_url: str | None = None,
                  clients: int = 8) -> EmbeddedResult:
    """Start ``runriver``, create ``runs`` runs over HTTP, wait for all to end; measure."""
    tmp = Path(tempfile.mkdtemp(prefix="river-bench-embedded-"))
    model = _model(model_seconds, turns)
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "RIVER_BROKER_URL", "DATABASE_URL")
           and not k.startswith("RIVER_TEST")}
    sqlite_path = tmp / "river.sqlite3"
    env.update(DJANGO_SETTINGS_MODULE="riverapp.settings", DEBUG="true", RIVER_VAR_DIR=str(tmp),
               DATABASE_URL=database_url or f"sqlite:///{sqlite_path}", LOG_LEVEL="WARNING",
               RIVER_LLM_MODEL="openai/embedded-bench", RIVER_LLM_BASE_URL=model.base_url,
               RIVER_LLM_API_KEY="embedded-bench-key", RIVER_RUNS_PER_PROCESS=str(max(200, runs)))
    manage = [sys.executable, str(ROOT / "manage.py")]
    result = EmbeddedResult(runs=runs, database="postgresql" if database_url else "sqlite")
    server = None
    if database_url:
        _database_recreate(database_url)
    try:
        for step in (["migrate", "--verbosity", "0"], ["shell", "-c", SEED]):
            seeded = subprocess.run([*manage, *step], cwd=ROOT, env=env, capture_output=True,  # noqa: S603
                                    text=True, timeout=600)
            if seeded.returncode:
                raise RuntimeError(f"manage.py {step[0]} failed: {seeded.stderr[-3000:]}")
        fixture = json.loads(seeded.stdout.strip().splitlines()[-1])
        port = _free_port()
        log = (tmp / "runriver.log").open("wb")
        server = subprocess.Popen([*manage, "runriver", "--port", str(port)], cwd=ROOT, env=env,  # noqa: S603
                                  stdout=log, stderr=subprocess.STDOUT)
        _wait_healthy(port, server, tmp / "runriver.log")
        counts = _Counts(database_url, sqlite_path)
        cpu_before, started = _cpu(server.pid), time.monotonic()
        codes = _create(port, fixture, runs, clients)
        result.created_in = time.monotonic() - started
        if codes.get(202, 0) != runs:
            raise RuntimeError(f"run creation answered {dict(codes)}")
        from executions.models import Execution

        terminal = "(" + ", ".join(f"'{status}'" for status in sorted(Execution.TERMINAL)) + ")"
        deadline = started + 120 + runs * turns * model_seconds / 4
        with counts.open() as query:
            while time.monotonic() < deadline:
                running, ended = query(
                    f"SELECT count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status IN {terminal}) "
                    f"FROM executions_execution")[0]
                result.peak_running = max(result.peak_running, running)
                if ended >= runs:
                    break
                time.sleep(0.1)
            result.all_ended_in = time.monotonic() - started
            result.cpu_seconds = _cpu(server.pid) - cpu_before
            result.statuses = Counter(dict(query("SELECT status, count(*) FROM executions_execution GROUP BY 1")))
            result.turns = query("SELECT coalesce(sum(turn_count), 0) FROM executions_execution")[0][0]
        return result
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=40)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)
        model.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _database_recreate(database_url: str) -> None:
    """A fresh database for the run (one left by an earlier run is dropped)."""
    import psycopg
    from psycopg import sql

    name = database_url.rsplit("/", 1)[1].split("?", 1)[0]
    with psycopg.connect(database_url, dbname="postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _wait_healthy(port: int, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"runriver did not start; its log ends:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def _create(port: int, fixture: dict, runs: int, clients: int) -> Counter:
    tickets, lock, codes = iter(range(runs)), threading.Lock(), Counter()
    headers = {"Authorization": f"Bearer {fixture['token']}", "Content-Type": "application/json"}
    body = json.dumps({"input_prompt": "What is in this workspace?"})

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while next(tickets, None) is not None:
            conn.request("POST", f"/api/v1/agents/{fixture['agent']}/run", body, headers)
            response = conn.getresponse()
            response.read()
            with lock:
                codes[response.status] += 1
        conn.close()

    threads = [threading.Thread(target=client, name=f"embedded-bench-{n}") for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


def embedded_bench(*, runs: int = 200, model_seconds: float = 1.0, turns: int = 3,
                   database_url: str | None = None) -> Iterator[str]:
    """Report lines: SQLite, then PostgreSQL when ``database_url`` is given."""
    for url in (None, database_url) if database_url else (None,):
        result = embedded_runs(runs=runs, model_seconds=model_seconds, turns=turns, database_url=url)
        completed = result.statuses.get("completed", 0)
        floor = turns * model_seconds
        yield (f"embedded ({result.database}): `manage.py runriver`, {runs} runs created over HTTP at once, model "
               f"{model_seconds:g} s a reply, {turns} turns a run ({TOOL}); load average {os.getloadavg()[0]:.1f}")
        yield (f"  {verdict(completed == runs, target=False)}: {completed}/{runs} completed"
               + ("" if completed == runs else f" (statuses {dict(result.statuses)})"))
        yield (f"  {verdict(result.peak_running >= min(runs, TARGET_IN_FLIGHT))}: runs in flight at once: peak "
               f"{result.peak_running} (target >= {min(runs, TARGET_IN_FLIGHT)})")
        yield (f"  all {runs} ended {result.all_ended_in:.1f} s after the first creation (created in "
               f"{result.created_in:.1f} s; one run alone takes at least {floor:g} s); the process's CPU "
               f"{result.cpu_seconds * 1000 / max(1, result.turns):.1f} ms a turn ({result.turns} turns)")

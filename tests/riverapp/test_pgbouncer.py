"""River behind PgBouncer in transaction mode (``RIVER_DB_TRANSACTION_POOLER``).

A private ``pgbouncer`` (Debian's, which ``.ci/run`` installs) listens on a free
127.0.0.1 port in ``pool_mode = transaction`` with a pool of three server sessions,
handed out in turn, and points at this suite's PostgreSQL. The test switches River's database connection, in
every thread, to it (pooled, as in a web or worker process, with the settings the
transaction-pooler setting gives) and drives real runs through it: runs hosted on a run
host (its I/O threads borrowing pooled connections), each calling a tool, pausing on a
governed write, approved by an approver, resumed and finished; and one run driven inside
its caller, whose journal writes behind on a connection of its own. Any session state
carried across transactions (a prepared statement, a server-side cursor) would land on
another server session and fail there."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
from django.db import connection, connections

from executions import tasks
from executions.models import Execution
from executions.runhost import RunHost
from executions.services import execution_run_segment, execution_start, person_run_request
from executions.services.segment import execution_host_segment
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from riverapp.env import database_behind_transaction_pooler
from rivercore.contracts import StepType
from tenancy.models import Membership
from tenancy.permissions import Role
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
SERVER_SESSIONS = 3  # PgBouncer's pool for the test database
RUNS = 8


def _required() -> bool:
    return os.environ.get("RIVER_REQUIRE_SERVICES", "").lower() in {"1", "true", "yes"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def pgbouncer():
    """A PgBouncer of this test's own, stopped at the end; yields its port."""
    binary = shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if Path(p).exists()), None)
    if binary is None:
        if _required():
            pytest.fail("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)")
        pytest.skip("pgbouncer is not installed")
    db = connection.settings_dict
    if connection.vendor != "postgresql" or (db["HOST"] or "127.0.0.1") not in {"127.0.0.1", "localhost"}:
        pytest.skip("needs this suite's PostgreSQL on 127.0.0.1")
    # PgBouncer refuses to run as root; as root it runs as postgres, which must read the files.
    directory = Path(tempfile.mkdtemp(prefix="river-pgbouncer-"))
    directory.chmod(0o755)
    port = _free_port()
    user = db["USER"] or "postgres"
    (directory / "users.txt").write_text(f'"{user}" "{db["PASSWORD"] or ""}"\n')
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host=127.0.0.1 port={db['PORT'] or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {directory / 'users.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {SERVER_SESSIONS}\nmin_pool_size = {SERVER_SESSIONS}\n"
        # Server sessions taken in turn, not the last one used first: consecutive
        # transactions of one client land on different sessions, as under load.
        "server_round_robin = 1\nmax_client_conn = 100\n"
        f"admin_users = {user}\n"
    )
    for path in directory.iterdir():
        path.chmod(0o644)
    as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
    log = directory / "pgbouncer.log"  # its stderr, written by this process (it may run as postgres)
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, *as_user, str(directory / "pgbouncer.ini")],  # noqa: S603
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(host="127.0.0.1", port=port, user=user, dbname=db["NAME"],
                                connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"pgbouncer did not start; its log ends:\n{log.read_text()[-2000:]}")
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def through_pgbouncer(pgbouncer, transactional_db):
    """River's connection, in every thread, goes through PgBouncer from now on: pooled
    (as in a web or worker process), with RIVER_DB_TRANSACTION_POOLER's settings. The
    settings dict is shared by every thread's connection, so it is changed in place."""
    entry = connections.settings["default"]
    saved = {key: entry.get(key) for key in ("HOST", "PORT", "OPTIONS", "CONN_MAX_AGE", "DISABLE_SERVER_SIDE_CURSORS")}
    connection.close()
    pooled = database_behind_transaction_pooler({**entry, "HOST": "127.0.0.1", "PORT": str(pgbouncer)})
    entry.update(HOST=pooled["HOST"], PORT=pooled["PORT"], CONN_MAX_AGE=0,
                 DISABLE_SERVER_SIDE_CURSORS=pooled["DISABLE_SERVER_SIDE_CURSORS"],
                 OPTIONS={**pooled["OPTIONS"], "pool": {"min_size": 1, "max_size": 4, "timeout": 10}})
    try:
        yield pgbouncer
    finally:
        connection.close()
        connection.close_pool()
        for key, value in saved.items():
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = value


@pytest.fixture
def resumes(monkeypatch):
    """Runs whose segment was queued (after commit), instead of going to a broker."""
    queued: list[int] = []
    monkeypatch.setattr(tasks.run_segment, "delay", lambda execution_id: queued.append(execution_id))
    monkeypatch.setattr(tasks.post_process, "delay", lambda execution_id: None)
    return queued


class ScriptedAsyncModel:
    """The hosted runs' model: a note, then the governed write, then the answer, chosen
    by how many assistant messages the conversation holds."""

    async def acomplete(self, *, messages, **request):
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn == 0:
            return tool_reply("durable_note", {"marker": "looked"}, "call_note")
        if turn == 1:
            return tool_reply("durable_write", {"marker": "written"}, "call_write")
        return text_reply("Wrote it.")

    def complete(self, **request):
        raise AssertionError("a hosted run called the blocking model port")


def _transactions_through(port: int, dbname: str) -> int:
    """Transactions PgBouncer has passed to ``dbname`` so far (its admin console)."""
    with psycopg.connect(host="127.0.0.1", port=port, user=connection.settings_dict["USER"] or "postgres",
                         dbname="pgbouncer", autocommit=True, cursor_factory=psycopg.ClientCursor) as admin:
        cursor = admin.execute("SHOW STATS")
        names = [column.name for column in cursor.description]
        return sum(int(dict(zip(names, row, strict=True))["total_xact_count"]) for row in cursor.fetchall()
                   if dict(zip(names, row, strict=True))["database"] == dbname)


def test_hosted_runs_pause_for_approval_resume_and_finish_behind_pgbouncer(
        through_pgbouncer, workspace, owner, django_user_model, resumes, durable_tool_records, monkeypatch):
    approver = django_user_model.objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=approver, role=Role.ADMIN)
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_note", "durable_write"],
                       action_level="act_with_approval", require_approval_for=["durable_write"])
    monkeypatch.setattr("executions.services.segment.llm_for_execution", lambda execution: ScriptedAsyncModel())
    before = _transactions_through(through_pgbouncer, connection.settings_dict["NAME"])
    runs = [execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt=f"write {i}"))
            for i in range(RUNS)]
    host = RunHost(capacity=RUNS)
    assert host.io_threads == 2  # several threads, each borrowing from the pool through PgBouncer

    for run in runs:
        execution_host_segment(execution_id=run.pk, host=host)
    assert host.wait_idle(timeout=120)
    paused = Execution.objects.filter(pk__in=[r.pk for r in runs])
    assert {e.status for e in paused} == {Execution.Status.AWAITING_APPROVAL}

    resumes.clear()
    for approval in ApprovalRequest.objects.filter(execution_id__in=[r.pk for r in runs]):
        approval_resolve(user=approver, approval_id=approval.pk, status="approved")
    assert sorted(resumes) == sorted(r.pk for r in runs)  # each resume queued on commit
    for execution_id in resumes:
        execution_host_segment(execution_id=execution_id, host=host)
    assert host.wait_idle(timeout=120)

    finished = Execution.objects.filter(pk__in=[r.pk for r in runs])
    assert {e.status for e in finished} == {Execution.Status.COMPLETED}
    for execution in finished:
        kinds = list(execution.steps.order_by("step_number").values_list("step_type", flat=True))
        assert kinds.count(StepType.OBSERVATION) == 2, kinds  # the note and the approved write
        assert kinds[-1] == StepType.FINAL_ANSWER
        assert execution.result["summary"] == "Wrote it."
    assert sorted(marker for name, marker in durable_tool_records[0] if name == "durable_write") == ["written"] * RUNS
    # Every statement went through PgBouncer: the runs' transactions are counted there.
    assert _transactions_through(through_pgbouncer, connection.settings_dict["NAME"]) - before > RUNS * 4


def test_a_run_driven_in_its_caller_writes_behind_through_pgbouncer(through_pgbouncer, workspace, owner,
                                                                    resumes, settings):
    """The write-behind journal sends each turn on a connection of its own: behind the
    pooler unnamed (parsed and run in one go), never as a named prepared statement."""
    settings.RIVER_JOURNAL_WRITE_BEHIND = True
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_note"])
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="notes"))
    llm = ScriptedLLM([tool_reply("durable_note", {"marker": f"n{turn}"}, f"c{turn}") for turn in range(6)]
                      + [text_reply("Noted six times.")])

    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED
    assert execution.turn_count == 7
    assert execution.steps.filter(step_type=StepType.OBSERVATION).count() == 6

"""An approved write that meets a transient database error is retried with backoff; a
permanent one is not, the run ends failed (not completed as if written) and the
approver is told. Every failure below is provoked for real in a PostgreSQL data
source: a serialization failure, a backend terminated by pg_terminate_backend (during
a statement, and during COMMIT), and ``stack depth limit exceeded``.
"""

from __future__ import annotations

import threading
import time
from unittest import mock

import pytest
from django.core import mail

from common.dberrors import Backoff, sqlstate_is_transient
from datasources import write_retry
from datasources.errors import QueryFailed
from datasources.services import data_source_discover, write_back_execute
from executions import services, tasks
from executions.models import Execution
from governance import tasks as governance_tasks
from governance.models import ApprovalRequest, AuditLogEntry, Notification
from governance.resolution import approval_resolve
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import pg_admin_connect, pg_count
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

WAIT_SECONDS = 20


@pytest.mark.parametrize(("sqlstate", "transient"), [
    ("40001", True),  # serialization_failure
    ("40P01", True),  # deadlock_detected
    ("08006", True),  # connection_failure (class 08)
    ("08000", True),
    ("57P01", True),  # admin_shutdown
    ("55P03", True),  # lock_not_available
    ("53300", True),  # too_many_connections
    ("54001", False),  # stack depth limit exceeded: deterministic
    ("42601", False),  # syntax_error
    ("42501", False),  # insufficient_privilege
    ("22012", False),  # division_by_zero
    ("23505", False),  # unique_violation
    ("57014", False),  # query_canceled (statement timeout: the same query would time out again)
    ("XX000", False),  # internal_error
    ("4000", False), ("", False), (None, False),
])
def test_sqlstate_classes(sqlstate, transient):
    assert sqlstate_is_transient(sqlstate) is transient


def test_backoff_grows_exponentially_under_its_cap_with_jitter():
    backoff = Backoff(attempts=6, base_seconds=0.1, cap_seconds=0.5)
    assert [backoff.delay(n, rng=lambda: 1.0) for n in range(1, 6)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert backoff.delay(3, rng=lambda: 0.25) == pytest.approx(0.1)
    assert backoff.delay(1, rng=lambda: 0.0) == 0.0


# --- real PostgreSQL failures -------------------------------------------------------------


class Sleeps:
    """Stands in for time.sleep in the retry loop: records each backoff, waits none."""

    def __init__(self):
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleeps(monkeypatch):
    recorder = Sleeps()
    monkeypatch.setattr(write_retry, "_sleep", recorder)
    return recorder


@pytest.fixture
def source(pg_source):
    data_source_discover(data_source=pg_source)
    return pg_source


def _wait_for(predicate, what: str):
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out after {WAIT_SECONDS} s waiting for {what}")


def _writer_pids(admin, role: str, *, wait_event: str | None = None, wait_type: str | None = None) -> list[int]:
    sql = "SELECT pid FROM pg_stat_activity WHERE usename = %s AND state <> 'idle'"
    params: list = [role]
    if wait_event:
        sql += " AND wait_event = %s"
        params.append(wait_event)
    if wait_type:
        sql += " AND wait_event_type = %s"
        params.append(wait_type)
    return [row[0] for row in admin.execute(sql, params).fetchall()]


class Writer(threading.Thread):
    """Runs one write_back in the background, keeping its result or error."""

    def __init__(self, **kwargs):
        super().__init__(daemon=True)
        self.kwargs = kwargs
        self.result = None
        self.error: BaseException | None = None

    def run(self):
        try:
            self.result = write_back_execute(**self.kwargs)
        except BaseException as exc:  # inspected by the test
            self.error = exc

    def outcome(self):
        self.join(timeout=WAIT_SECONDS)
        assert not self.is_alive(), "the write did not finish"
        return self.result, self.error


@pytest.mark.django_db
def test_serialization_failure_is_retried_and_the_write_lands_once(source, pg_tables, sleeps):
    role = pg_tables["user"]
    with pg_admin_connect(pg_tables) as admin:
        admin.execute(f'ALTER ROLE "{role}" SET default_transaction_isolation = \'repeatable read\'')
    try:
        with pg_admin_connect(pg_tables) as holder, pg_admin_connect(pg_tables) as watcher:
            holder.autocommit = False
            holder.execute("UPDATE charges SET status = 'held' WHERE id = 1")  # row lock, not committed
            writer = Writer(data_source=source, table_name="charges", operation="update",
                            data={"amount": 42}, conditions={"id": 1})
            writer.start()
            # The writer's snapshot is taken, and it waits for the row: committing the
            # holder now makes its UPDATE fail with 40001 under repeatable read.
            _wait_for(lambda: _writer_pids(watcher, role, wait_type="Lock"), "the write to wait for the row lock")
            holder.commit()
            result, error = writer.outcome()
    finally:
        with pg_admin_connect(pg_tables) as admin:
            admin.execute(f'ALTER ROLE "{role}" RESET default_transaction_isolation')

    assert error is None, error
    assert result.rows_affected == 1
    assert len(sleeps.delays) == 1  # one retry, after one backoff
    assert pg_count(pg_tables, "SELECT count(*) FROM charges WHERE id = 1 AND amount = 42 AND status = 'held'") == 1


@pytest.mark.django_db
def test_backend_terminated_mid_statement_is_retried_and_inserts_exactly_once(source, pg_tables, sleeps):
    role = pg_tables["user"]
    with pg_admin_connect(pg_tables) as holder, pg_admin_connect(pg_tables) as watcher:
        holder.autocommit = False
        holder.execute("LOCK TABLE charges IN SHARE MODE")  # INSERTs wait
        writer = Writer(data_source=source, table_name="charges", operation="insert",
                        data={"customer_id": 1, "amount": 3, "status": "terminated-once"})
        writer.start()
        first = _wait_for(lambda: _writer_pids(watcher, role, wait_type="Lock"), "the insert to wait")[0]
        watcher.execute("SELECT pg_terminate_backend(%s)", [first])
        # The retry opens a new connection and waits for the same lock again.
        _wait_for(lambda: [p for p in _writer_pids(watcher, role, wait_type="Lock") if p != first],
                  "the retried insert to wait")
        holder.rollback()
        result, error = writer.outcome()

    assert error is None, error
    assert result.rows_affected == 1
    assert len(sleeps.delays) == 1
    assert pg_count(pg_tables, "SELECT count(*) FROM charges WHERE status = 'terminated-once'") == 1


@pytest.mark.django_db
def test_backend_terminated_during_commit_is_outcome_unknown_and_never_retried(source, pg_tables, sleeps):
    """A deferred constraint trigger holds the COMMIT in pg_sleep; the backend is
    terminated there. The server never answered the COMMIT, so a retry could write
    twice: the write is reported as outcome unknown instead."""
    role = pg_tables["user"]
    with pg_admin_connect(pg_tables) as admin:
        admin.execute("""
            CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$;
            CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON charges DEFERRABLE INITIALLY DEFERRED
            FOR EACH ROW WHEN (NEW.status = 'slow-commit') EXECUTE FUNCTION slow_commit();
        """)
    with pg_admin_connect(pg_tables) as watcher:
        writer = Writer(data_source=source, table_name="charges", operation="insert",
                        data={"customer_id": 1, "amount": 3, "status": "slow-commit"})
        writer.start()
        pid = _wait_for(lambda: _writer_pids(watcher, role, wait_event="PgSleep"), "the COMMIT to be in flight")[0]
        watcher.execute("SELECT pg_terminate_backend(%s)", [pid])
        result, error = writer.outcome()

    assert isinstance(error, write_retry.WriteOutcomeUnknown), error
    assert error.details["attempts"] == 1
    assert sleeps.delays == []


@pytest.fixture
def stack_depth_trigger(pg_tables):
    """Inserting a charge with status 'deep' recurses until PostgreSQL raises
    54001 stack depth limit exceeded: a deterministic error, the same every time."""
    with pg_admin_connect(pg_tables) as admin:
        admin.execute("""
            CREATE FUNCTION recurse(n integer) RETURNS integer LANGUAGE plpgsql AS $$
            BEGIN RETURN recurse(n + 1); END $$;
            CREATE FUNCTION deep_insert() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM recurse(0); RETURN NEW; END $$;
            CREATE TRIGGER deep BEFORE INSERT ON charges FOR EACH ROW WHEN (NEW.status = 'deep')
            EXECUTE FUNCTION deep_insert();
        """)
    return pg_tables


@pytest.mark.django_db
def test_stack_depth_limit_is_permanent_and_not_retried(source, stack_depth_trigger, sleeps):
    with pytest.raises(QueryFailed) as raised:
        write_back_execute(data_source=source, table_name="charges", operation="insert",
                           data={"customer_id": 1, "amount": 1, "status": "deep"})

    assert "stack depth limit exceeded" in raised.value.message
    assert sleeps.delays == []
    assert pg_count(stack_depth_trigger, "SELECT count(*) FROM charges WHERE status = 'deep'") == 0


@pytest.mark.django_db
def test_transient_errors_that_persist_give_up_after_the_bounded_attempts(source, pg_tables, sleeps, monkeypatch):
    """The target refuses every connection attempt (too many connections for the
    role, SQLSTATE 53300): a bounded number of attempts with growing backoff, then
    ``write_failed``, nothing written."""
    role = pg_tables["user"]
    monkeypatch.setattr(write_retry, "WRITE_BACKOFF", Backoff(attempts=3, base_seconds=0.1, cap_seconds=1.0))
    with pg_admin_connect(pg_tables) as admin:
        admin.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT 0')
    try:
        with pytest.raises(write_retry.WriteFailed) as raised:
            write_back_execute(data_source=source, table_name="charges", operation="insert",
                               data={"customer_id": 1, "amount": 1, "status": "never"})
    finally:
        with pg_admin_connect(pg_tables) as admin:
            admin.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT -1')

    assert raised.value.details["attempts"] == 3
    assert len(sleeps.delays) == 2
    assert pg_count(pg_tables, "SELECT count(*) FROM charges WHERE status = 'never'") == 0


# --- the run and the approver ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the tool thread reads the committed data source
def test_approved_write_that_fails_permanently_fails_the_run_and_tells_the_approver(
    workspace, owner, editor, source, stack_depth_trigger, sleeps
):
    editor.email = "editor@example.com"
    editor.save(update_fields=["email"])
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"], action_level="act_with_approval",
                       require_approval_for=["write_back"], data_sources=[source])
    args = {"data_source_id": source.pk, "table_name": "charges", "operation": "insert",
            "data": {"customer_id": 1, "amount": 9, "status": "deep"}}
    with mock.patch.object(tasks.run_segment, "delay"), mock.patch.object(tasks.post_process, "delay"), \
            mock.patch.object(governance_tasks.notify_approval, "delay"):
        execution = services.execution_start(agent=agent, request=services.person_run_request(
            agent=agent, user=owner, prompt="Refund"))
        services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([tool_reply("write_back", args)]))
        approval = ApprovalRequest.objects.get(execution_id=execution.pk)
        approval_resolve(user=editor, approval_id=approval.pk, status="approved")
        model = ScriptedLLM([text_reply("Refund written, all done.")])
        status = services.execution_run_segment(execution_id=execution.pk, llm=model)

    execution.refresh_from_db()
    assert status == "failed"
    assert execution.status == Execution.Status.FAILED
    assert model.requests == []  # the model never got to call it a success
    assert "approved write_back call failed" in execution.error["message"]
    assert "stack depth limit exceeded" in execution.error["message"]
    assert execution.error["details"]["approved_call_failed"] is True
    summary = (execution.result or {}).get("summary", "")
    assert summary.startswith("Nothing was written: the data tool call failed (write_back:")
    assert "all done" not in summary
    observation = execution.steps.filter(step_type="observation", tool_name="write_back").get()
    assert observation.status == "failed"
    assert sleeps.delays == []  # permanent: not retried
    assert pg_count(stack_depth_trigger, "SELECT count(*) FROM charges WHERE status = 'deep'") == 0

    notice = Notification.objects.get(user=editor, kind="approved_action_failed")
    assert str(execution.pk) in notice.title
    assert [m.to for m in mail.outbox if "failed" in m.subject] == [["editor@example.com"]]
    assert AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approved_action_failed").count() == 1

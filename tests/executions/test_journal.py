"""The durable journal on PostgreSQL: one self-committing statement per flush,
fenced by the lease, prepared once per connection, sent write-behind on the
journal's own connection (or, with RIVER_JOURNAL_WRITE_BEHIND off, on Django's and
waited for); the audited flush runs in one transaction. ``transaction=True`` so the
journal sees autocommit mode, as it does in a worker (inside a test transaction it
would take the savepoint path). Tests that hold for both ways of sending run twice."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import psycopg
import pytest
from django.db import DatabaseError, connection

from executions.journal import DbJournal
from executions.models import Execution, ExecutionEvent, ExecutionStep
from executions.services import execution_claim, execution_start, person_run_request, state_load
from executions.write_behind import journal_connections_close
from governance.models import AuditLogEntry
from rivercore.contracts import Step, StepStatus, StepType, Tokens
from rivercore.runner import RunInterrupted
from rivercore.state import RunState
from telemetry import events as telemetry_events
from tests.factories import make_agent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the single-statement journal is PostgreSQL's"),
]


@pytest.fixture(params=["write_behind", "wait"])
def mode(request, settings):
    settings.RIVER_JOURNAL_WRITE_BEHIND = request.param == "write_behind"
    return request.param


@pytest.fixture
def published(monkeypatch):
    batches: list[tuple[list[str], list[dict]]] = []
    # Every committed batch through the publisher, where it is recorded (no direct send).
    monkeypatch.setattr(telemetry_events, "_direct_paused_until", float("inf"))
    monkeypatch.setattr(telemetry_events._publisher, "submit",
                        lambda groups, events, key=None: batches.append((groups, events)))
    return batches


@pytest.fixture
def running(workspace, owner, monkeypatch):
    from executions import tasks

    monkeypatch.setattr(tasks.run_segment, "delay", lambda *args: None)
    agent = make_agent(workspace=workspace, owner=owner, tools=[], action_level="automated")
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    token = execution_claim(execution_id=execution.pk)
    assert token
    execution = Execution.objects.select_related("workspace").get(pk=execution.pk)
    return execution, token


def _commit(journal: DbJournal, state: RunState) -> None:
    """Flush and wait for the commit, whichever way the flush was sent."""
    journal.flush(state)
    journal.settle()


def _turn(state: RunState, journal: DbJournal, *, governance: bool = False) -> None:
    """Record one turn's steps and events the way the engine does."""
    turn = state.turn + 1
    steps = [Step(step_number=state.next_step_number, step_type=StepType.REASONING, turn=turn, model_used="m",
                  tokens=Tokens(input=10, output=2), output={"content": "thinking", "tool_calls": []},
                  messages=[{"role": "assistant", "content": "thinking"}])]
    if governance:
        steps.append(Step(step_number=state.next_step_number + 1, step_type=StepType.GOVERNANCE_CHECK, turn=turn,
                          tool_name="write_back", call_id="c1", governance_decision="PROCEED",
                          status=StepStatus.COMPLETED, output={"reason": "allowed"}))
    for step in steps:
        state.apply(step)
        journal.record(state, step)
    journal.emit("turn_reasoning", {"turn": turn})
    journal.emit("turn_complete", {"turn": turn})


class _Statements:
    """Statements on the connection, and whether each ran outside a transaction."""

    def __init__(self):
        self.seen: list[tuple[str, bool]] = []

    def __call__(self, execute, sql, params, many, context):
        self.seen.append((sql, connection.get_autocommit()))
        return execute(sql, params, many, context)


def test_a_flush_is_one_statement_that_commits_by_itself(running, published, mode):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    _turn(state, journal)
    statements = _Statements()
    with connection.execute_wrapper(statements):
        _commit(journal, state)

    assert len(statements.seen) == 1
    sql, autocommit = statements.seen[0]
    assert "WITH lease AS" in sql and autocommit
    assert list(ExecutionStep.objects.filter(execution=execution).values_list("step_number", "step_type")) == [
        (1, "reasoning")]
    assert list(ExecutionEvent.objects.filter(execution=execution).order_by("seq").values_list("event_type",
                                                                                               flat=True)) == [
        "turn_reasoning", "turn_complete"]
    execution.refresh_from_db()
    assert (execution.turn_count, execution.tokens_input, execution.tokens_output) == (1, 10, 2)
    # Published after the statement committed, as one batch, with the stored sequence numbers,
    # followed by the run's status block as of those events.
    ((_, batch),) = published
    *events, status = batch
    assert [(e["type"], e["seq"]) for e in events] == [("turn_reasoning", 1), ("turn_complete", 2)]
    assert status == {"type": "status", "execution_id": execution.pk, "status_detail": {
        "phase": "running", "run_status": "running", "turn": {"current": 1, "max": 15},
        "tokens": {"used": 12, "budget": 100_000}, "current_tool": None, "last_event_seq": 2}}


def _prepared_journal_statements(cursor) -> int:
    cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%WITH lease AS%"])
    return cursor.fetchone()[0]


def test_the_statement_is_prepared_once_per_connection(running, published, mode):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    for _ in range(3):
        _turn(state, journal)
        _commit(journal, state)
    if mode == "write_behind":
        # Prepared on the journal's own connection, not on Django's.
        with connection.cursor() as cursor:
            assert _prepared_journal_statements(cursor) == 0
        with journal._connection.conn.cursor() as cursor:
            assert _prepared_journal_statements(cursor) == 1
    else:
        with connection.cursor() as cursor:
            assert _prepared_journal_statements(cursor) == 1
    assert list(ExecutionStep.objects.filter(execution=execution).values_list("step_number", flat=True)) == [1, 2, 3]
    assert list(ExecutionEvent.objects.filter(execution=execution).values_list("seq", flat=True)) == list(range(1, 7))


def test_a_lost_lease_writes_nothing_and_publishes_nothing(running, published, mode):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    Execution.objects.filter(pk=execution.pk).update(lease_token="another-worker")
    _turn(state, journal)

    with pytest.raises(RunInterrupted):
        _commit(journal, state)

    assert not ExecutionStep.objects.filter(execution=execution).exists()
    assert not ExecutionEvent.objects.filter(execution=execution).exists()
    execution.refresh_from_db()
    assert execution.turn_count == 0
    assert published == []


def test_a_cancelled_run_writes_nothing(running, published, mode):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    Execution.objects.filter(pk=execution.pk).update(status=Execution.Status.CANCELLED)
    _turn(state, journal)

    with pytest.raises(RunInterrupted):
        _commit(journal, state)
    assert not ExecutionStep.objects.filter(execution=execution).exists()


def test_a_conflicting_step_number_rolls_the_whole_flush_back(running, published, mode):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    ExecutionStep.objects.create(execution=execution, step_number=1, step_type="reasoning")  # another writer
    _turn(state, journal)

    with pytest.raises(RunInterrupted):
        _commit(journal, state)

    assert ExecutionStep.objects.filter(execution=execution).count() == 1
    assert not ExecutionEvent.objects.filter(execution=execution).exists()
    execution.refresh_from_db()
    assert execution.turn_count == 0


def test_an_audited_flush_writes_steps_and_audit_in_one_transaction(running, published, mode):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    _turn(state, journal)
    journal.flush(state)  # write-behind: still on its way when the audited flush starts
    _turn(state, journal, governance=True)
    statements = _Statements()
    with connection.execute_wrapper(statements):
        journal.flush(state)

    # The audited flush waited for the one before it, then ran on Django's connection.
    assert journal._pending is None
    assert statements.seen and not any(autocommit for _, autocommit in statements.seen)
    assert ExecutionStep.objects.filter(execution=execution).count() == 3
    entry = AuditLogEntry.objects.get(event_type="governance_decision", execution_id=execution.pk)
    assert entry.details["tool_name"] == "write_back"
    assert [[e["seq"] for e in batch if e["type"] != "status"] for _, batch in published] == [[1, 2], [3, 4]]


def test_an_audited_flush_with_a_lost_lease_writes_no_audit_entry(running, published, mode):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    Execution.objects.filter(pk=execution.pk).update(lease_token="another-worker")
    _turn(state, journal, governance=True)

    with pytest.raises(RunInterrupted):
        _commit(journal, state)
    assert not AuditLogEntry.objects.filter(execution_id=execution.pk).exists()
    assert not ExecutionStep.objects.filter(execution=execution).exists()


# --- write-behind ------------------------------------------------------------------------


@pytest.fixture
def behind(running, settings):
    """Write-behind on, and a journal for the running execution with its state."""
    settings.RIVER_JOURNAL_WRITE_BEHIND = True
    execution, token = running
    return SimpleNamespace(execution=execution, token=token, state=state_load(execution),
                           journal=DbJournal(execution, token))


@pytest.fixture
def row_locked(running):
    """A second session holding the execution row's lock until ``release`` is called,
    so a journal statement sent meanwhile cannot commit."""
    execution, _ = running
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    other = psycopg.connect(**params)
    other.execute("SELECT id FROM executions_execution WHERE id = %s FOR UPDATE", [execution.pk])
    yield other.rollback
    other.close()


def test_write_behind_returns_before_the_commit_and_publishes_after_it(behind, published, row_locked):
    execution, state, journal = behind.execution, behind.state, behind.journal
    _turn(state, journal)

    journal.flush(state)  # returns although the statement is waiting for the row lock

    assert not ExecutionStep.objects.filter(execution=execution).exists()
    assert published == []
    row_locked()
    journal.settle()
    assert ExecutionStep.objects.filter(execution=execution).count() == 1
    assert [[e["seq"] for e in batch if e["type"] != "status"] for _, batch in published] == [[1, 2]]


def test_write_behind_publishes_a_commit_nobody_waits_for(behind, monkeypatch):
    """While the engine is busy elsewhere (a long model call), the settler reads the
    result and publishes the turn's events: nobody calls ``settle``."""
    arrived = threading.Event()
    batches: list[list[dict]] = []

    def submit(groups, events, key=None):
        batches.append(events)
        arrived.set()

    # Every committed batch through the publisher, where it is recorded (no direct send).

    monkeypatch.setattr(telemetry_events, "_direct_paused_until", float("inf"))

    monkeypatch.setattr(telemetry_events._publisher, "submit", submit)
    execution, state, journal = behind.execution, behind.state, behind.journal
    _turn(state, journal)

    journal.flush(state)

    assert arrived.wait(10), "the settler never published the committed events"
    assert journal._pending.done.is_set() and journal._pending.rows == 1
    assert [[e["seq"] for e in batch if e["type"] != "status"] for batch in batches] == [[1, 2]]
    assert ExecutionStep.objects.filter(execution=execution).count() == 1
    journal.settle()  # nothing left to wait for; the events are not published twice
    assert len(batches) == 1


def test_write_behind_the_next_flush_waits_for_the_previous_one(behind, published, row_locked):
    execution, state, journal = behind.execution, behind.state, behind.journal
    _turn(state, journal)
    journal.flush(state)
    first = journal._pending
    row_locked()
    _turn(state, journal)
    journal.flush(state)

    assert first.done.is_set() and first.rows == 1  # settled before the second was sent
    journal.settle()
    assert list(ExecutionStep.objects.filter(execution=execution).values_list("step_number", flat=True)) == [1, 2]


def test_write_behind_reports_a_lost_lease_one_flush_later(behind, published):
    execution, state, journal = behind.execution, behind.state, behind.journal
    _turn(state, journal)
    Execution.objects.filter(pk=execution.pk).update(lease_token="another-worker")

    journal.flush(state)  # sent; the refusal is not known yet
    _turn(state, journal)
    with pytest.raises(RunInterrupted):
        journal.flush(state)  # waits for the previous statement first, and stops

    assert not ExecutionStep.objects.filter(execution=execution).exists()
    assert published == []


def test_write_behind_a_dropped_connection_fails_the_write_and_is_replaced(behind, published):
    execution, state, journal = behind.execution, behind.state, behind.journal
    _turn(state, journal)
    _commit(journal, state)
    dropped = journal._connection
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [dropped.conn.info.backend_pid])

    _turn(state, journal)
    with pytest.raises(DatabaseError):
        _commit(journal, state)
    journal.close()

    # The next segment gets a new connection and carries on from what committed.
    state = state_load(execution)
    journal = DbJournal(execution, behind.token)
    _turn(state, journal)
    _commit(journal, state)
    assert journal._connection is not dropped
    assert list(ExecutionStep.objects.filter(execution=execution).values_list("step_number", flat=True)) == [1, 2]
    journal.close()


def test_a_connection_ended_between_segments_is_replaced_before_any_write(behind, published):
    """The server ended the session while the journal sat idle: the next segment sees the
    goodbye on the socket and connects anew, so no write is lost to it."""
    execution, state, journal = behind.execution, behind.state, behind.journal
    _turn(state, journal)
    _commit(journal, state)
    dropped = journal._connection
    journal.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [dropped.conn.info.backend_pid])
    deadline = time.monotonic() + 10
    while dropped.check() and time.monotonic() < deadline:  # the goodbye reaches the socket
        time.sleep(0.01)

    state = state_load(execution)
    journal = DbJournal(execution, behind.token)
    _turn(state, journal)
    _commit(journal, state)

    assert journal._connection is not dropped and not dropped.check()
    assert list(ExecutionStep.objects.filter(execution=execution).values_list("step_number", flat=True)) == [1, 2]
    journal.close()


@pytest.mark.parametrize("max_age", [60, 0])
def test_write_behind_connection_lives_as_long_as_conn_max_age(behind, published, monkeypatch, max_age):
    """Kept and reused by the thread's next segment, as Django keeps its own; with
    CONN_MAX_AGE = 0, closed when the segment ends."""
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", max_age)
    journal_connections_close()  # start from a connection opened with this max age
    execution, token, state, first = behind.execution, behind.token, behind.state, behind.journal
    _turn(state, first)
    _commit(first, state)
    opened = first._connection
    first.close()

    second = DbJournal(execution, token)
    _turn(state, second)
    _commit(second, state)
    second.close()

    if max_age:
        assert second._connection is None and not opened.conn.closed
        assert _thread_connection() is opened
    else:
        assert opened.conn.closed and _thread_connection() is not opened
    assert list(ExecutionStep.objects.filter(execution=execution).values_list("step_number", flat=True)) == [1, 2]


def test_write_behind_a_failed_connect_is_a_database_error(behind, published, monkeypatch):
    """Like a failure on Django's own connection: the segment stops with a
    DatabaseError (the watchdog re-queues the run) instead of failing the run."""
    from executions import write_behind

    journal_connections_close()

    class Unreachable:
        def __init__(self, *args, **kwargs):
            raise psycopg.OperationalError("connection refused")

    monkeypatch.setattr(write_behind, "JournalConnection", Unreachable)
    execution, state, journal = behind.execution, behind.state, behind.journal
    _turn(state, journal)

    with pytest.raises(DatabaseError):
        journal.flush(state)
    assert not ExecutionStep.objects.filter(execution=execution).exists()


def _thread_connection():
    from executions import write_behind

    return getattr(write_behind._local, "connection", None)


def test_journal_connections_close_ends_the_sessions(behind, published):
    state, journal = behind.state, behind.journal
    _turn(state, journal)
    _commit(journal, state)
    pid = journal._connection.conn.info.backend_pid

    journal_connections_close()

    # The server ends the session when it reads the client's Terminate message, a
    # moment after close() returns: wait for that (bounded), then check.
    deadline = time.monotonic() + 10
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            alive = cursor.fetchone()[0]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert alive == 0

"""The durable journal on PostgreSQL: one self-committing statement per flush,
fenced by the lease, prepared once per connection; the audited flush runs in one
transaction. ``transaction=True`` so the journal sees autocommit mode, as it does
in a worker (inside a test transaction it would take the savepoint path)."""

from __future__ import annotations

import pytest
from django.db import connection

from executions.engine.contracts import Step, StepStatus, StepType, Tokens
from executions.engine.runner import RunInterrupted
from executions.engine.state import RunState
from executions.journal import DbJournal
from executions.models import Execution, ExecutionEvent, ExecutionStep
from executions.services import execution_claim, execution_start, state_load
from governance.models import AuditLogEntry
from telemetry import events as telemetry_events
from tests.factories import make_agent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the single-statement journal is PostgreSQL's"),
]


@pytest.fixture
def published(monkeypatch):
    batches: list[tuple[list[str], list[dict]]] = []
    monkeypatch.setattr(telemetry_events._publisher, "submit", lambda groups, events: batches.append((groups, events)))
    return batches


@pytest.fixture
def running(workspace, owner, monkeypatch):
    from executions import tasks

    monkeypatch.setattr(tasks.run_segment, "delay", lambda *args: None)
    agent = make_agent(workspace=workspace, owner=owner, tools=[], action_level="automated")
    execution = execution_start(agent=agent, user=owner, input_prompt="go")
    token = execution_claim(execution_id=execution.pk)
    assert token
    execution = Execution.objects.select_related("workspace").get(pk=execution.pk)
    return execution, token


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


def test_a_flush_is_one_statement_that_commits_by_itself(running, published):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    _turn(state, journal)
    statements = _Statements()
    with connection.execute_wrapper(statements):
        journal.flush(state)

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
    # Published after the statement returned, as one batch, with the stored sequence numbers.
    assert [[(e["type"], e["seq"]) for e in batch] for _, batch in published] == [
        [("turn_reasoning", 1), ("turn_complete", 2)]]


def test_the_statement_is_prepared_once_per_connection(running, published):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    for _ in range(3):
        _turn(state, journal)
        journal.flush(state)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%WITH lease AS%"])
        assert cursor.fetchone()[0] == 1
    assert ExecutionStep.objects.filter(execution=execution).count() == 3


def test_a_lost_lease_writes_nothing_and_publishes_nothing(running, published):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    Execution.objects.filter(pk=execution.pk).update(lease_token="another-worker")
    _turn(state, journal)

    with pytest.raises(RunInterrupted):
        journal.flush(state)

    assert not ExecutionStep.objects.filter(execution=execution).exists()
    assert not ExecutionEvent.objects.filter(execution=execution).exists()
    execution.refresh_from_db()
    assert execution.turn_count == 0
    assert published == []


def test_a_cancelled_run_writes_nothing(running, published):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    Execution.objects.filter(pk=execution.pk).update(status=Execution.Status.CANCELLED)
    _turn(state, journal)

    with pytest.raises(RunInterrupted):
        journal.flush(state)
    assert not ExecutionStep.objects.filter(execution=execution).exists()


def test_a_conflicting_step_number_rolls_the_whole_flush_back(running, published):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    ExecutionStep.objects.create(execution=execution, step_number=1, step_type="reasoning")  # another writer
    _turn(state, journal)

    with pytest.raises(RunInterrupted):
        journal.flush(state)

    assert ExecutionStep.objects.filter(execution=execution).count() == 1
    assert not ExecutionEvent.objects.filter(execution=execution).exists()
    execution.refresh_from_db()
    assert execution.turn_count == 0


def test_an_audited_flush_writes_steps_and_audit_in_one_transaction(running, published):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    _turn(state, journal, governance=True)
    statements = _Statements()
    with connection.execute_wrapper(statements):
        journal.flush(state)

    assert statements.seen and not any(autocommit for _, autocommit in statements.seen)
    assert ExecutionStep.objects.filter(execution=execution).count() == 2
    entry = AuditLogEntry.objects.get(event_type="governance_decision", execution_id=execution.pk)
    assert entry.details["tool_name"] == "write_back"


def test_an_audited_flush_with_a_lost_lease_writes_no_audit_entry(running, published):
    execution, token = running
    state = state_load(execution)
    journal = DbJournal(execution, token)
    Execution.objects.filter(pk=execution.pk).update(lease_token="another-worker")
    _turn(state, journal, governance=True)

    with pytest.raises(RunInterrupted):
        journal.flush(state)
    assert not AuditLogEntry.objects.filter(execution_id=execution.pk).exists()
    assert not ExecutionStep.objects.filter(execution=execution).exists()

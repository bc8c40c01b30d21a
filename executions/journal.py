"""The durable journal: each flush appends the buffered steps and events and checks
the lease in one transaction. Its cost per turn is constant: rows are inserted,
and the execution row is updated with fixed-size counters only."""

from __future__ import annotations

import functools
import logging
from datetime import datetime
from decimal import Decimal

import orjson
import psycopg
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DEFAULT_DB_ALIAS, DatabaseError, IntegrityError, connections, transaction
from django.utils import timezone

from executions import modelcalls
from executions.models import Execution, ExecutionEvent, ExecutionStep, ModelCallBlob, ModelCallRecord
from executions.progress import status_block_of_state, status_message, status_update
from executions.write_behind import (
    JournalConnection,
    Pending,
    journal_connection,
    journal_connection_release,
    numbered,
)
from governance.audit import audit_record
from rivercore.contracts import Step
from rivercore.events import event_message
from rivercore.runner import RunInterrupted
from rivercore.state import RunState
from rivercore.text import json_storable
from telemetry.events import events_publish, events_publish_committed

logger = logging.getLogger(__name__)


def step_columns(step: Step) -> dict:
    """A step's ExecutionStep column values (all JSON-ready)."""
    return {
        "step_number": step.step_number,
        "turn": step.turn,
        "step_type": step.step_type.value,
        "tool_name": step.tool_name or "",
        "tool_category": step.tool_category or "",
        "call_id": step.call_id or "",
        "input": step.input,
        "output": step.output,
        "model_used": step.model_used or "",
        "model_tier": step.model_tier or "",
        "provider": step.provider or "",
        "tokens": step.tokens.model_dump() if step.tokens else None,
        "duration_ms": step.duration_ms,
        "status": step.status.value,
        "governance_decision": step.governance_decision.value if step.governance_decision else "",
        "error": step.error or "",
        "messages": step.messages,
    }


def step_row(execution_id: int, step: Step) -> ExecutionStep:
    """An unsaved row; text PostgreSQL cannot store (NUL, lone surrogates) is escaped."""
    return ExecutionStep(execution_id=execution_id, **json_storable(step_columns(step)))


def step_from_row(row: ExecutionStep) -> Step:
    return Step(
        step_number=row.step_number,
        step_type=row.step_type,
        turn=row.turn,
        tool_name=row.tool_name or None,
        tool_category=row.tool_category or None,
        call_id=row.call_id or None,
        input=row.input,
        output=row.output,
        model_used=row.model_used or None,
        model_tier=row.model_tier or None,
        provider=row.provider or None,
        tokens=row.tokens,
        duration_ms=row.duration_ms,
        status=row.status,
        governance_decision=row.governance_decision or None,
        error=row.error or None,
        messages=row.messages or [],
    )


def event_rows_publish(execution: Execution, rows: list[ExecutionEvent]) -> None:
    """Call inside the transaction that inserts ``rows``: they go out after commit,
    followed by the run's status update (its status as ``execution`` has it now)."""
    messages = [event_message(event_type=row.event_type, seq=row.seq, execution_id=execution.pk,
                              created_at=row.created_at, payload=row.payload) for row in rows]
    events_publish(workspace_id=execution.workspace_id, execution_id=execution.pk, session_id=execution.session_id,
                   events=[*messages, run_status_message(execution, last_event_seq=max((r.seq for r in rows),
                                                                                       default=None))])


def run_status_message(execution: Execution, *, last_event_seq: int | None) -> dict:
    """The live ``status`` message for a run whose status just moved (docs/api.md)."""
    return status_message(execution_id=execution.pk,
                          block=status_update(status=execution.status, last_event_seq=last_event_seq))


def governance_decisions_audit(
    *, organization_id: int, workspace_id: int, execution_id: int, agent_id, steps: list[Step]
) -> int:
    """One audit entry per governance decision step (the approver's resolutions are
    audited where they are made)."""
    written = 0
    for step in steps:
        if step.step_type != "governance_check" or not step.governance_decision:
            continue
        output = step.output if isinstance(step.output, dict) else {}
        if "resolution" in output and not output["resolution"].get("auto_approved"):
            continue
        audit_record(
            organization_id=organization_id, workspace_id=workspace_id, event_type="governance_decision",
            execution_id=execution_id, agent_id=agent_id, policy_id=output.get("policy_id"),
            details={"tool_name": step.tool_name, "decision": step.governance_decision.value,
                     "reason": output.get("reason", ""), "policy": output.get("policy_matched"),
                     "enforcement": output.get("enforcement"), "point": output.get("point", "before_tool"),
                     "step_number": step.step_number, "arguments": step.input},
        )
        written += 1
    return written


def next_event_seq(execution_id: int) -> int:
    last = ExecutionEvent.objects.filter(execution_id=execution_id).order_by("-seq").values_list("seq", flat=True)
    return (last.first() or 0) + 1


def _audited(steps: list[Step]) -> bool:
    """Whether ``governance_decisions_audit`` writes anything for ``steps``."""
    return any(step.step_type == "governance_check" and step.governance_decision for step in steps)


class DbJournal:
    """Commits each flush's steps and events, checking the run's lease.

    On PostgreSQL a flush is usually a single statement that commits by itself (no
    BEGIN, no COMMIT): the lease-checked UPDATE of the execution row and the step and
    event inserts, which take their execution id from the UPDATE's RETURNING, so
    nothing is written when the lease is gone. With ``RIVER_JOURNAL_WRITE_BEHIND``
    (the default) that statement is sent on the journal's own connection and the
    engine goes on while it commits (``executions.write_behind``); ``settle`` waits
    for it. The next flush settles the previous one first, so flushes commit in
    order and a lost lease stops the run at the latest one flush later; the engine
    settles before a write tool is dispatched and the segment before it ends. A
    flush that also writes audit entries (a governance decision), or one made inside
    a transaction, runs on Django's connection in one transaction instead."""

    def __init__(self, execution: Execution, lease_token: str, *, write_behind: bool | None = None,
                 seq: int | None = None):
        self.execution = execution
        self.write_behind = settings.RIVER_JOURNAL_WRITE_BEHIND if write_behind is None else write_behind
        self.lease_token = lease_token
        self.steps: list[Step] = []
        self.events: list[tuple[str, dict]] = []
        self.seq = next_event_seq(execution.pk) if seq is None else seq  # the next event's number
        self._connection: JournalConnection | None = None
        self._pending: Pending | None = None
        self.model_blobs: list[dict] = []
        self.model_calls: list[dict] = []
        modelcalls.run_open(execution.pk)  # the run's model calls are written with its turns

    def record(self, state: RunState, new_step: Step) -> None:
        self.steps.append(new_step)

    def emit(self, event_type: str, payload: dict) -> None:
        self.events.append((event_type, payload))

    def flush(self, state: RunState) -> None:
        if not self.steps and not self.events:
            return
        self.settle()
        blobs, calls = modelcalls.calls_take(self.execution.pk)
        self.model_blobs += blobs
        self.model_calls += calls
        # One time for the flush's events, stored with them and sent with them, so a live
        # event equals the same event read back (rivercore.events.event_message).
        now = timezone.now()
        events = [(self.seq + i, event_type, payload, now) for i, (event_type, payload) in enumerate(self.events)]
        # What clients receive once this commits: the events, then the run's status block as of them.
        block = status_block_of_state(state, last_event_seq=self.seq + len(events) - 1)
        messages = [*self._event_dicts(events), status_message(execution_id=self.execution.pk, block=block)]
        cost = sum((m.estimated_cost or 0.0) for m in state.models_used.values())
        # The lease is renewed by the segment's heartbeat, not here: a per-turn write
        # of lease_expires_at (an indexed column) would make this fixed-size update
        # rewrite every index of the executions table instead of staying a HOT update.
        counters = {
            "turn_count": state.turn,
            "tokens_input": state.tokens_input,
            "tokens_output": state.tokens_output,
            "cost_usd": Decimal(str(round(cost, 6))),
            "cost_unknown": any(not m.cost_known for m in state.models_used.values()),
        }
        db = connections[DEFAULT_DB_ALIAS]  # looked up once: the proxy costs a thread-local lookup per use
        try:
            if db.vendor == "postgresql" and not db.in_atomic_block and not _audited(self.steps):
                if self.write_behind:
                    self._send(db, events, counters, messages)
                else:
                    if len(_execute_prepared(db, _TURN_SQL, self._params(events, counters))) != 1:
                        raise RunInterrupted("lease lost")
                    self._publish(messages)  # the statement has committed
            else:
                with transaction.atomic(using=db.alias):
                    if db.vendor == "postgresql":
                        updated = len(_execute_prepared(db, _TURN_SQL, self._params(events, counters)))
                    else:
                        updated = self._write_orm(events, counters)
                    if updated != 1:
                        raise RunInterrupted("lease lost")
                    governance_decisions_audit(
                        organization_id=self.execution.workspace.organization_id,
                        workspace_id=self.execution.workspace_id, execution_id=self.execution.pk,
                        agent_id=self.execution.agent_id, steps=self.steps,
                    )
                    self._publish_on_commit(messages)
        except (IntegrityError, RunInterrupted):
            # Another worker owns the run now (or it was cancelled): stop, write nothing.
            raise RunInterrupted("the run was cancelled or this worker lost its lease") from None
        self.seq += len(events)
        self.steps.clear()
        self.events.clear()
        self.model_blobs, self.model_calls = [], []

    def settle(self) -> None:
        """Wait until the last flush has committed; raise ``RunInterrupted`` if it
        wrote nothing (lease lost, run cancelled, another worker's rows) and
        Django's ``DatabaseError`` if it failed otherwise."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        db = connections[DEFAULT_DB_ALIAS]
        try:
            with db.wrap_database_errors:
                rows = self._connection.wait(pending)
        except IntegrityError:
            rows = 0
        if rows != 1:
            raise RunInterrupted("the run was cancelled or this worker lost its lease")

    def close(self) -> None:
        """End of the segment: wait for a statement still on its way (its outcome no
        longer matters to a segment that is stopping) and let the connection go if
        it must not outlive the segment."""
        try:
            self.settle()
        except (RunInterrupted, DatabaseError):
            logger.info("execution %s: the last journal write did not commit", self.execution.pk)
        finally:
            modelcalls.run_close(self.execution.pk)
            if self._connection is not None:
                journal_connection_release(self._connection)
                self._connection = None

    def _send(self, db, events: list[tuple[int, str, dict, datetime]], counters: dict, messages: list[dict]) -> None:
        if self._connection is None or not self._connection.usable():
            with db.wrap_database_errors:  # cannot connect: a DatabaseError, as for Django's connection
                self._connection = journal_connection(db)
        params = self._params(events, counters)
        connection = self._connection

        def send(sql, params, many, context):
            values = [params[name] for name in _TURN_NAMES]
            self._pending = connection.submit(_TURN_STATEMENT, _TURN_SQL_NUMBERED, values,
                                              functools.partial(self._publish, messages))

        # Observers of Django's connection (execute_wrappers) see the statement as it
        # is sent; it runs on the journal's connection.
        _through_wrappers(db, send, _TURN_SQL, params)

    def _params(self, events: list[tuple[int, str, dict, datetime]], counters: dict) -> dict:
        return {
            **counters,
            "execution_id": self.execution.pk,
            "lease_token": self.lease_token,
            "status": Execution.Status.RUNNING.value,
            "steps": _json([step_columns(s) for s in self.steps]),
            "events": _json([{"seq": seq, "event_type": kind, "payload": payload, "created_at": at.isoformat()}
                             for seq, kind, payload, at in events]),
            "model_blobs": _json(self.model_blobs),
            "model_calls": _json(self.model_calls),
        }

    def _event_dicts(self, events: list[tuple[int, str, dict, datetime]]) -> list[dict]:
        execution_id = self.execution.pk
        return [event_message(event_type=kind, seq=seq, execution_id=execution_id, created_at=at, payload=payload)
                for seq, kind, payload, at in events]

    def _publish(self, messages: list[dict]) -> None:
        """For messages whose statement has committed (on any connection)."""
        events_publish_committed(workspace_id=self.execution.workspace_id, execution_id=self.execution.pk,
                                 session_id=self.execution.session_id, events=messages)

    def _publish_on_commit(self, messages: list[dict]) -> None:
        events_publish(workspace_id=self.execution.workspace_id, execution_id=self.execution.pk,
                       session_id=self.execution.session_id, events=messages)

    def _write_orm(self, events: list[tuple[int, str, dict, datetime]], counters: dict) -> int:
        updated = Execution.objects.filter(
            pk=self.execution.pk, lease_token=self.lease_token, status=Execution.Status.RUNNING
        ).update(**counters)
        if updated:
            ExecutionStep.objects.bulk_create([step_row(self.execution.pk, s) for s in self.steps])
            ExecutionEvent.objects.bulk_create([
                ExecutionEvent(execution_id=self.execution.pk, seq=seq, event_type=kind, payload=payload, created_at=at)
                for seq, kind, payload, at in events
            ])
            modelcalls._rows_write_orm(self.execution.pk, self.model_blobs, self.model_calls)
        return updated


_django_json_default = DjangoJSONEncoder().default


def _json(value) -> str:
    """JSON text for the journal statement. orjson: several times faster than the
    standard library on the step payloads serialised every turn; values it does not
    know (Decimal, lazy strings) are converted as Django's encoder does. A NUL
    (``\\u0000``, which jsonb refuses) or a lone surrogate (which orjson refuses) is
    escaped (rivercore.text) rather than failing the flush on every retry."""
    try:
        text = orjson.dumps(value, default=_django_json_default, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        text = b"\\u0000"  # not valid UTF-8 (a lone surrogate): take the escaping path below
    if b"\\u0000" in text:
        text = orjson.dumps(json_storable(value), default=_django_json_default, option=orjson.OPT_NON_STR_KEYS)
    return text.decode()


def _execute_prepared(db, sql: str, params: dict) -> list[tuple]:
    """Run ``sql`` as a server-side prepared statement on Django's connection (in the
    current transaction, or committing by itself in autocommit mode); return its rows.

    Django's psycopg cursors bind parameters on the client, so PostgreSQL plans every
    statement again; the journal's statement is the same every turn and its planning
    cost as much as its execution. It still passes through the connection's
    ``execute_wrappers`` (anything that observes queries sees it) and Django's error
    translation (a unique violation is ``django.db.IntegrityError``)."""

    def execute(sql, params, many, context):
        with psycopg.Cursor(db.connection) as cursor:
            cursor.execute(sql, params, prepare=True)
            return cursor.fetchall()

    db.ensure_connection()
    return _through_wrappers(db, execute, sql, params)


def _through_wrappers(db, execute, sql: str, params: dict):
    """Call ``execute(sql, params, many, context)`` the way Django's cursors call a
    statement: through the connection's ``execute_wrappers``, inside its error
    translation."""
    executor = execute
    for wrapper in reversed(db.execute_wrappers):
        executor = functools.partial(wrapper, executor)
    with db.wrap_database_errors:
        return executor(sql, params, False, {"connection": db, "cursor": None})


_STEP_COLUMNS = (
    "step_number", "turn", "step_type", "tool_name", "tool_category", "call_id", "input", "output", "model_used",
    "model_tier", "provider", "tokens", "duration_ms", "status", "governance_decision", "error", "messages",
)
# A flush in one statement. Every CTE sees the same snapshot and runs to completion;
# the inserts select from ``lease`` (the UPDATE's RETURNING), so they write rows
# only when this worker still holds a running lease.
_TURN_SQL = f"""
WITH lease AS (
    UPDATE {Execution._meta.db_table}
    SET turn_count = %(turn_count)s, tokens_input = %(tokens_input)s, tokens_output = %(tokens_output)s,
        cost_usd = %(cost_usd)s, cost_unknown = %(cost_unknown)s
    WHERE id = %(execution_id)s AND lease_token = %(lease_token)s AND status = %(status)s
    RETURNING id
), new_steps AS (
    INSERT INTO {ExecutionStep._meta.db_table} (execution_id, created_at, {", ".join(_STEP_COLUMNS)})
    SELECT lease.id, now(), {", ".join("s." + c for c in _STEP_COLUMNS)}
    FROM lease, jsonb_to_recordset(%(steps)s::jsonb) AS s(
        step_number integer, turn integer, step_type text, tool_name text, tool_category text, call_id text,
        input jsonb, output jsonb, model_used text, model_tier text, provider text, tokens jsonb,
        duration_ms integer, status text, governance_decision text, error text, messages jsonb)
), new_events AS (
    INSERT INTO {ExecutionEvent._meta.db_table} (execution_id, created_at, seq, event_type, payload)
    SELECT lease.id, e.created_at, e.seq, e.event_type, e.payload
    FROM lease, jsonb_to_recordset(%(events)s::jsonb) AS e(seq integer, event_type text, payload jsonb,
        created_at timestamptz)
), new_model_blobs AS (
    INSERT INTO {ModelCallBlob._meta.db_table} (execution_id, digest, body)
    SELECT lease.id, b.digest, decode(b.body, 'base64')
    FROM lease, jsonb_to_recordset(%(model_blobs)s::jsonb) AS b(digest text, body text)
    ON CONFLICT (execution_id, digest) DO NOTHING
), new_model_calls AS (
    INSERT INTO {ModelCallRecord._meta.db_table} (execution_id, created_at, turn, tier, model, provider,
        timeout_seconds, shared_prefix, digests, tools_digest, output, error, duration_ms)
    SELECT lease.id, now(), c.turn, c.tier, c.model, c.provider, c.timeout_seconds, c.shared_prefix, c.digests,
        c.tools_digest, decode(c.output, 'base64'), c.error, c.duration_ms
    FROM lease, jsonb_to_recordset(%(model_calls)s::jsonb) AS c(turn integer, tier text, model text,
        provider text, timeout_seconds double precision, shared_prefix integer, digests jsonb, tools_digest text,
        output text, error text, duration_ms integer)
)
SELECT id FROM lease
"""
_TURN_STATEMENT = b"river_journal_turn"
_TURN_SQL_NUMBERED, _TURN_NAMES = numbered(_TURN_SQL)

"""The durable journal: each flush appends the buffered steps and events and renews
the lease in one transaction. Its cost per turn is constant: rows are inserted,
and the execution row is updated with fixed-size counters only."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from executions.engine.contracts import Step
from executions.engine.runner import RunInterrupted
from executions.engine.state import RunState
from executions.models import Execution, ExecutionEvent, ExecutionStep
from governance.audit import audit_record
from telemetry.events import events_publish


def step_row(execution_id: int, step: Step) -> ExecutionStep:
    return ExecutionStep(
        execution_id=execution_id,
        step_number=step.step_number,
        turn=step.turn,
        step_type=step.step_type.value,
        tool_name=step.tool_name or "",
        tool_category=step.tool_category or "",
        call_id=step.call_id or "",
        input=step.input,
        output=step.output,
        model_used=step.model_used or "",
        model_tier=step.model_tier or "",
        provider=step.provider or "",
        tokens=step.tokens.model_dump() if step.tokens else None,
        duration_ms=step.duration_ms,
        status=step.status.value,
        governance_decision=step.governance_decision.value if step.governance_decision else "",
        error=step.error or "",
        messages=step.messages,
    )


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
    """Call inside the transaction that inserts ``rows``: they go out after commit."""
    events_publish(
        workspace_id=execution.workspace_id,
        execution_id=execution.pk,
        events=[{"type": row.event_type, "seq": row.seq, "execution_id": execution.pk, **row.payload} for row in rows],
    )


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


class DbJournal:
    def __init__(self, execution: Execution, lease_token: str):
        self.execution = execution
        self.lease_token = lease_token
        self.steps: list[Step] = []
        self.events: list[tuple[str, dict]] = []
        self.seq = next_event_seq(execution.pk)

    def record(self, state: RunState, new_step: Step) -> None:
        self.steps.append(new_step)

    def emit(self, event_type: str, payload: dict) -> None:
        self.events.append((event_type, payload))

    def flush(self, state: RunState) -> None:
        if not self.steps and not self.events:
            return
        event_rows = []
        for event_type, payload in self.events:
            event_rows.append(
                ExecutionEvent(execution_id=self.execution.pk, seq=self.seq, event_type=event_type, payload=payload)
            )
            self.seq += 1
        cost = sum((m.estimated_cost or 0.0) for m in state.models_used.values())
        try:
            self._commit(state, event_rows, cost)
        except (IntegrityError, RunInterrupted):
            # Another worker owns the run now (or it was cancelled): stop, write nothing.
            raise RunInterrupted("the run was cancelled or this worker lost its lease") from None
        self.steps.clear()
        self.events.clear()

    def _commit(self, state: RunState, event_rows: list[ExecutionEvent], cost: float) -> None:
        counters = {
            "turn_count": state.turn,
            "tokens_input": state.tokens_input,
            "tokens_output": state.tokens_output,
            "cost_usd": Decimal(str(round(cost, 6))),
            "cost_unknown": any(not m.cost_known for m in state.models_used.values()),
            "lease_expires_at": timezone.now() + timedelta(seconds=settings.RIVER_LEASE_SECONDS),
        }
        with transaction.atomic():
            if connection.vendor == "postgresql":
                updated = self._write_postgresql(event_rows, counters)
            else:
                updated = self._write_orm(event_rows, counters)
            if updated != 1:
                raise RunInterrupted("lease lost")
            governance_decisions_audit(
                organization_id=self.execution.workspace.organization_id, workspace_id=self.execution.workspace_id,
                execution_id=self.execution.pk, agent_id=self.execution.agent_id, steps=self.steps,
            )
            event_rows_publish(self.execution, event_rows)

    def _write_orm(self, event_rows: list[ExecutionEvent], counters: dict) -> int:
        if self.steps:
            ExecutionStep.objects.bulk_create([step_row(self.execution.pk, s) for s in self.steps])
        if event_rows:
            ExecutionEvent.objects.bulk_create(event_rows)
        return Execution.objects.filter(
            pk=self.execution.pk, lease_token=self.lease_token, status=Execution.Status.RUNNING
        ).update(**counters)

    def _write_postgresql(self, event_rows: list[ExecutionEvent], counters: dict) -> int:
        """The turn in one statement: both inserts ride in data-modifying CTEs of the
        lease-checked UPDATE. If the lease is gone the UPDATE returns nothing and the
        caller rolls the inserts back. One round trip plus COMMIT per turn."""
        steps = [
            {field: getattr(row, field) for field in _STEP_COLUMNS}
            for row in (step_row(self.execution.pk, s) for s in self.steps)
        ]
        events = [{"seq": e.seq, "event_type": e.event_type, "payload": e.payload} for e in event_rows]
        params = {
            **counters,
            "execution_id": self.execution.pk,
            "lease_token": self.lease_token,
            "status": Execution.Status.RUNNING,
            "now": timezone.now(),
            "steps": json.dumps(steps, cls=DjangoJSONEncoder),
            "events": json.dumps(events, cls=DjangoJSONEncoder),
        }
        with connection.cursor() as cursor:
            cursor.execute(_TURN_SQL, params)
            return len(cursor.fetchall())


_STEP_COLUMNS = (
    "step_number", "turn", "step_type", "tool_name", "tool_category", "call_id", "input", "output", "model_used",
    "model_tier", "provider", "tokens", "duration_ms", "status", "governance_decision", "error", "messages",
)
_TURN_SQL = f"""
WITH new_steps AS (
    INSERT INTO {ExecutionStep._meta.db_table} (execution_id, created_at, {", ".join(_STEP_COLUMNS)})
    SELECT %(execution_id)s, %(now)s, {", ".join("s." + c for c in _STEP_COLUMNS)}
    FROM jsonb_to_recordset(%(steps)s::jsonb) AS s(
        step_number integer, turn integer, step_type text, tool_name text, tool_category text, call_id text,
        input jsonb, output jsonb, model_used text, model_tier text, provider text, tokens jsonb,
        duration_ms integer, status text, governance_decision text, error text, messages jsonb)
), new_events AS (
    INSERT INTO {ExecutionEvent._meta.db_table} (execution_id, created_at, seq, event_type, payload)
    SELECT %(execution_id)s, %(now)s, e.seq, e.event_type, e.payload
    FROM jsonb_to_recordset(%(events)s::jsonb) AS e(seq integer, event_type text, payload jsonb)
)
UPDATE {Execution._meta.db_table}
SET turn_count = %(turn_count)s, tokens_input = %(tokens_input)s, tokens_output = %(tokens_output)s,
    cost_usd = %(cost_usd)s, cost_unknown = %(cost_unknown)s, lease_expires_at = %(lease_expires_at)s
WHERE id = %(execution_id)s AND lease_token = %(lease_token)s AND status = %(status)s
RETURNING id
"""

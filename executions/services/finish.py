"""How runs end, each ending in one place, and what follows once a run has ended
(post-processing: the agent's health, its long-term memory, outcome notifications).

Every ending goes through ``run_end``: the terminal status and what goes with it, the
``run_completed`` event, and post-processing queued after commit. The endings are
the engine's (completed, failed, max turns, budget, timeout: ``execution_segment_end``),
a crash or give-up (``run_end_failed``), a cancel and an expired approval."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import orjson
from django.db import connection, transaction
from django.utils import timezone

from agents.services import agent_health_record, agent_memory_record
from common.compiled import CompiledQuery
from executions.journal import event_rows_publish, next_event_seq
from executions.models import Execution, ExecutionEvent, ExecutionSegment, ExecutionStep
from executions.runend import RunEnded, run_end_handlers_call
from executions.services.notify import run_end_notify
from executions.services.queue import post_process_queue_on_commit
from rivercore.contracts import Decision, StepStatus, StepType
from rivercore.events import approval_resolved_event, run_completed_event
from rivercore.outcome import Outcome, StepLike, outcome_of, outcome_read
from rivercore.text import json_storable
from rivercore.types.runs import RunStatus
from telemetry import traces
from telemetry.aftercommit import call_on_commit

logger = logging.getLogger("river.executions")

_SUCCESS = {Execution.Status.COMPLETED}
_NEUTRAL = {Execution.Status.CANCELLED, Execution.Status.APPROVAL_EXPIRED}


def run_error(code: str, message: str) -> dict:
    """The stored error of a run ended outside the engine (the engine's own has the same shape)."""
    return {"code": code, "message": message, "recoverable": False, "details": {}}


def run_outcome(status: str, steps: Sequence[StepLike] | None, *, execution_id: int) -> Outcome:
    """The outcome of a run ending ``status``: from ``steps`` when the caller holds them
    (the engine's state), else from the stored steps (only a completed run's are read)."""
    if steps is None and status == Execution.Status.COMPLETED:
        steps = list(ExecutionStep.objects.filter(execution_id=execution_id).order_by("step_number")
                     .only("step_type", "status", "tool_name", "call_id", "governance_decision", "output"))
    return outcome_of(status, steps or [])


def segment_close(*, execution_id: int, ended_at, ended_as: str, measure: bool = True) -> int | None:
    """End the run's open segment (its end is written once; a run paused or queued has
    none open, and nothing is written). Returns the run's active milliseconds up to
    ``ended_at``: every segment's length, the one just ended included; None for a run
    with no segment (queued before segments were recorded), and None without reading
    anything when ``measure`` is false. Caller holds the run's row lock or its lease."""
    ExecutionSegment.objects.filter(execution_id=execution_id, ended_at__isnull=True).update(
        ended_at=ended_at, ended_as=ended_as)
    if not measure:
        return None
    spans = list(ExecutionSegment.objects.filter(execution_id=execution_id).values_list("started_at", "ended_at"))
    if not spans:
        return None
    return sum(max(int((end - start).total_seconds() * 1000), 0) for start, end in spans if end is not None)


def run_end(row: Execution, *, status: str, summary: str, error: dict | None = None, result: dict | None = None,
            usage: dict | None = None, duration_ms: int | None = None, turns: int | None = None,
            seq: int | None = None, steps: Sequence[StepLike] | None = None) -> None:
    """End a run. The caller holds the row lock inside its transaction and has checked
    the run may end this way. ``seq`` is the next event number when the caller knows it;
    ``steps`` are the run's steps when the caller holds them (the outcome is read from them)."""
    assert status in Execution.TERMINAL, status
    # A segment still open ends with the run, or where its lease ran out when its
    # worker is gone (the watchdog ending a run out of attempts).
    held_until = row.lease_expires_at
    row.status = status
    row.outcome = run_outcome(status, steps, execution_id=row.pk).value
    row.finished_at = timezone.now()
    row.lease_token = ""
    row.lease_expires_at = None
    row.error = error
    fields = ["status", "outcome", "finished_at", "lease_token", "lease_expires_at", "error"]
    if result is not None:
        row.result = result
        fields.append("result")
    if usage is not None:
        row.usage = usage
        fields.append("usage")
    row.save(update_fields=fields)
    active_ms = segment_close(execution_id=row.pk, ended_at=min(row.finished_at, held_until or row.finished_at),
                              ended_as=ExecutionSegment.EndedAs.ENDED)
    if duration_ms is None:
        # The run's time is its segments' (waits excluded); a run from before segments
        # were recorded has none and counts from its first start.
        if active_ms is not None:
            duration_ms = active_ms
        else:
            duration_ms = int((row.finished_at - row.started_at).total_seconds() * 1000) if row.started_at else 0
    kind, payload = run_completed_event(status=row.status, outcome=row.outcome, duration_ms=max(duration_ms, 0),
                                        turns_used=row.turn_count if turns is None else turns,
                                        final_output_summary=summary)
    event = ExecutionEvent.objects.create(execution=row, seq=next_event_seq(row.pk) if seq is None else seq,
                                          event_type=kind, payload=payload)
    event_rows_publish(row, [event])
    post_process_queue_on_commit(row.pk)


def run_end_leased(execution: Execution, *, token: str, status: str, summary: str, error: dict | None,
                   result: dict, usage: dict, duration_ms: int, turns: int, seq: int,
                   steps: Sequence[StepLike], now=None) -> bool:
    """End a run whose lease the caller holds, as ``run_end`` does, without locking and
    reading the row first: the update checks the lease. On PostgreSQL the update and the
    ``run_completed`` event are one statement. Returns False (nothing written) when the
    lease was lost or the run cancelled meanwhile. ``now`` is when it ended (the time its
    ``duration_ms`` was measured to), now by default."""
    assert status in Execution.TERMINAL, status
    now = now or timezone.now()
    outcome = outcome_of(status, steps).value
    kind, payload = run_completed_event(status=status, outcome=outcome, duration_ms=max(duration_ms, 0),
                                        turns_used=turns, final_output_summary=summary)
    values = {"error": json_storable(error), "result": json_storable(result), "usage": usage}
    event = ExecutionEvent(execution_id=execution.pk, seq=seq, event_type=kind, payload=json_storable(payload),
                           created_at=now)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_END_SQL, {
                "id": execution.pk, "token": token, "running": Execution.Status.RUNNING, "status": status,
                "outcome": outcome,
                "now": now, **{name: None if value is None else orjson.dumps(value).decode() for name, value in
                               values.items()},
                "seq": seq, "kind": kind, "payload": orjson.dumps(event.payload).decode(),
                "ended_as": ExecutionSegment.EndedAs.ENDED.value,
            })
            ended = cursor.fetchone() is not None
    else:
        with transaction.atomic():
            leased = Execution.objects.filter(pk=execution.pk, lease_token=token, status=Execution.Status.RUNNING)
            ended = leased.update(status=status, outcome=outcome, finished_at=now, lease_token="",
                                  lease_expires_at=None, **values) == 1
            if ended:
                event.save(force_insert=True)
                segment_close(execution_id=execution.pk, ended_at=now, ended_as=ExecutionSegment.EndedAs.ENDED,
                              measure=False)
    if ended:
        execution.status, execution.outcome, execution.finished_at = status, outcome, now
        event_rows_publish(execution, [event])
        post_process_queue_on_commit(execution.pk)
    return ended


_END_SQL = f"""
WITH ended AS (
    UPDATE {Execution._meta.db_table}
    SET status = %(status)s, outcome = %(outcome)s, finished_at = %(now)s, lease_token = '', lease_expires_at = NULL,
        error = %(error)s::jsonb, result = %(result)s::jsonb, usage = %(usage)s::jsonb
    WHERE id = %(id)s AND lease_token = %(token)s AND status = %(running)s
    RETURNING id
), segment AS (
    -- The segment ends with the run.
    UPDATE {ExecutionSegment._meta.db_table} SET ended_at = %(now)s, ended_as = %(ended_as)s
    WHERE execution_id = (SELECT id FROM ended) AND ended_at IS NULL
)
INSERT INTO {ExecutionEvent._meta.db_table} (execution_id, seq, event_type, payload, created_at)
SELECT id, %(seq)s, %(kind)s, %(payload)s::jsonb, %(now)s FROM ended
RETURNING id
"""


def run_end_failed(row: Execution, *, code: str, message: str) -> None:
    """End a running or queued run ``failed`` (a crash, or out of attempts)."""
    run_end(row, status=Execution.Status.FAILED, summary=message, error=run_error(code, message))


def verdict_trace_on_commit(row: Execution, *, approval_id, resolution: str, decision: str,
                            resolved_by=None) -> None:
    """Once the caller's transaction commits, the verdict on a paused call (a person's,
    or the request closing without one) as a ``river_agent.governance_check`` span in
    the run's trace (docs/observability.md). Free when tracing is off."""
    if not traces.tracing_enabled() or not row.traceparent:
        return
    from governance.models import ApprovalRequest

    request = ApprovalRequest.objects.filter(pk=approval_id).values("tool_name", "tool_call_id").first() or {}
    check = (ExecutionStep.objects.filter(execution_id=row.pk, call_id=request.get("tool_call_id") or "",
                                          step_type=StepType.GOVERNANCE_CHECK, status=StepStatus.PENDING)
             .order_by("-step_number").values("turn", "output").first() or {})
    output = check.get("output") if isinstance(check.get("output"), dict) else {}
    span = {
        "traceparent": row.traceparent, "execution_id": row.pk, "turn": check.get("turn") or row.turn_count,
        "tool_name": request.get("tool_name") or "", "decision": decision,
        "policy_matched": str(output.get("policy_matched") or ""), "resolution": str(resolution),
        "approval_id": str(approval_id), "resolved_by": resolved_by,
    }
    transaction.on_commit(lambda: traces.governance_verdict_span(**span))


def _approvals_resolved_emit(row: Execution, approval_ids: list, resolution: str) -> None:
    """``approval_resolved`` for requests that end without an approver's decision
    (expired, or closed by a cancel): ``resolved_by`` is null, ``resolution`` says why.
    Emitted before the run's ``run_completed``, in the caller's transaction."""
    if not approval_ids:
        return
    for approval_id in approval_ids:
        verdict_trace_on_commit(row, approval_id=approval_id, resolution=resolution, decision=Decision.BLOCKED.value)
    seq = next_event_seq(row.pk)
    events = []
    for offset, approval_id in enumerate(approval_ids):
        kind, payload = approval_resolved_event(approval_id=approval_id, resolution=resolution, resolved_by=None)
        events.append(ExecutionEvent(execution=row, seq=seq + offset, event_type=kind, payload=payload))
    event_rows_publish(row, ExecutionEvent.objects.bulk_create(events))


def run_end_cancelled(row: Execution, *, by: str) -> None:
    """End a run that a person cancelled; its open approval requests close with it."""
    from governance.approvals import approvals_close_for_execution
    from governance.models import ApprovalRequest

    pending = list(ApprovalRequest.objects.filter(execution_id=row.pk, status=ApprovalRequest.Status.PENDING)
                   .order_by("created_at").values_list("pk", flat=True))
    _approvals_resolved_emit(row, pending, "cancelled")
    run_end(row, status=Execution.Status.CANCELLED, summary="cancelled",
            error=run_error("CANCELLED", f"Cancelled by {by}"))
    approvals_close_for_execution(execution_id=row.pk, reason="run cancelled", cancelled_by=by)


def gave_up_message(attempts: int, infra_error: str) -> str:
    last = f"; last infrastructure error: {infra_error}" if infra_error else ""
    return (f"gave up after {attempts} segment attempts (workers kept dying or the database or broker "
            f"kept failing{last})")


def execution_end_expired(*, execution_id: int) -> None:
    """The approval expired: the run ends ``approval_expired`` (caller audited it)."""
    row = Execution.objects.select_for_update().get(pk=execution_id)
    if row.status != Execution.Status.AWAITING_APPROVAL:
        return
    from governance.models import ApprovalRequest

    expired, kind, tool_name = (
        ApprovalRequest.objects.filter(execution_id=execution_id, status=ApprovalRequest.Status.EXPIRED)
        .order_by("-resolved_at").values_list("pk", "kind", "tool_name").first() or (None, None, None))
    _approvals_resolved_emit(row, [expired] if expired else [], "expired")
    if kind == ApprovalRequest.Kind.UNKNOWN_OUTCOME:  # never a success: nobody said whether it happened
        run_end(row, status=Execution.Status.APPROVAL_EXPIRED, summary="outcome unknown, nobody confirmed",
                error=run_error("OUTCOME_UNKNOWN", f"The outcome of {tool_name} is unknown and nobody confirmed "
                                "whether it happened before the request expired."))
        return
    run_end(row, status=Execution.Status.APPROVAL_EXPIRED, summary="approval expired",
            error=run_error("APPROVAL_EXPIRED", "The approval request expired."))


# --- post-execution processing -----------------------------------------------------------


# What post-processing reads (the run with its agent, workspace and version) and what
# memory write-back reads (the run's observation and governance steps; a memory of the
# same summary), compiled once per process (common.compiled): once a run, the ORM's
# compilation of these was a third of post-processing's CPU.
_POST_PROCESSED = CompiledQuery(
    lambda pk: Execution.objects.select_related("agent", "workspace", "agent_version").filter(pk=pk),
    pk=-(2**62) + 271,
)
# Not ``execution.steps``: a related manager reads each row's ``execution_id`` back,
# which ``only()`` leaves out, so every step would cost a query of its own.
_MEMORY_STEPS = CompiledQuery(
    lambda execution_id: ExecutionStep.objects.filter(
        execution_id=execution_id, step_type__in=[StepType.OBSERVATION, StepType.GOVERNANCE_CHECK])
    .only("step_type", "status", "tool_name", "error").order_by("step_number"),
    execution_id=-(2**62) + 272,
)


def execution_post_process(*, execution_id: int) -> bool:
    """Spec step 9, exactly once per run: health, memory write-back, notifications,
    and the run-end handlers of the apps above (``executions.runend``).
    Returns False when another call already did it.

    The claim (``post_processed_at``), the health update and the memory row commit
    together, so a worker killed half-way leaves nothing done and the watchdog does
    it all again; a second caller finds the claim taken. Notifications go out after
    that commit (network calls stay outside transactions)."""
    with transaction.atomic():
        claimed = Execution.objects.filter(pk=execution_id, post_processed_at__isnull=True).filter(
            status__in=Execution.TERMINAL
        ).update(post_processed_at=timezone.now())
        if claimed != 1:
            return False
        execution = _POST_PROCESSED.first(pk=execution_id)
        agent_health_update(agent_id=execution.agent_id, status=execution.status, execution_id=execution.pk,
                            outcome=execution.outcome)
        if execution.outcome == Outcome.ANSWERED:  # a blocked, rejected or unanswered run teaches nothing
            _memory_write_best_effort(execution)
        _notify_outcome(execution)
        run_end_notify(execution)
        run_end_handlers_call(RunEnded(
            execution_id=execution.pk, workspace_id=execution.workspace_id, agent_id=execution.agent_id,
            status=RunStatus(execution.status), summary=((execution.result or {}).get("summary") or "")[:2000],
            trigger_type=execution.trigger_type, trigger_id=execution.trigger_id,
            parent_execution_id=execution.parent_execution_id, requested_by_id=execution.requested_by_id,
            session_id=execution.session_id, outcome=execution.outcome,
            queue_wait_seconds=(execution.started_at - execution.queued_at).total_seconds()
            if execution.started_at and execution.queued_at else None,
            action_level=execution.agent_version.action_level if execution.agent_version else None,
        ))
    return True


def _memory_write_best_effort(execution: Execution) -> None:
    """Memory is best effort: a failure is logged and rolled back to its savepoint,
    and never changes the run or the rest of its post-processing."""
    try:
        with transaction.atomic():
            memory_write(execution_id=execution.pk, agent_id=execution.agent_id, result=execution.result)
    except Exception:  # noqa: BLE001 - memory is best-effort by design
        logger.exception("memory write-back failed for execution %s (run status unchanged)", execution.pk)


# What a run's outcome says about its agent's health: answered is a success; these are
# failures (no_answer included); blocked is neither (a run of them needs attention);
# the rest (rejected, partial, cancelled, expired: a person's decision, or some done) do not count.
_HEALTH_FAILURES = {Outcome.FAILED, Outcome.NO_ANSWER, Outcome.TIMEOUT, Outcome.MAX_TURNS, Outcome.BUDGET}


def agent_health_update(*, agent_id, status: str, execution_id: int, outcome: str | None = None) -> None:
    """A run's outcome counts into its agent's health (``_HEALTH_FAILURES``; a blocked run
    names its policy). A run without an outcome (ended before outcomes existed) counts
    by its status."""
    if outcome is None:
        if status not in _NEUTRAL:
            agent_health_record(agent_id=agent_id, succeeded=status in _SUCCESS, execution_id=execution_id)
        return
    if outcome == Outcome.BLOCKED:
        steps = ExecutionStep.objects.filter(execution_id=execution_id).order_by("step_number").only(
            "step_type", "status", "tool_name", "call_id", "governance_decision", "output")
        policy = outcome_read(status, list(steps)).policy or "a governance policy"
        agent_health_record(agent_id=agent_id, succeeded=False, execution_id=execution_id, blocked_by=policy)
    elif outcome == Outcome.ANSWERED or outcome in _HEALTH_FAILURES:
        agent_health_record(agent_id=agent_id, succeeded=outcome == Outcome.ANSWERED, execution_id=execution_id)


def _notify_outcome(execution: Execution) -> None:
    """Per the agent version's notification_config: which outcomes, which channels.
    Sent after commit; a failing channel is logged and never touches the run."""
    from rivercore.types.agents import NotificationConfig

    config = NotificationConfig.model_validate(execution.agent_version.notification_config or {})
    if execution.status not in config.notify_on or not config.channels:
        return
    from governance.notifications import notify_run_outcome

    kwargs = {
        "workspace_id": execution.workspace_id, "execution_id": execution.pk, "agent_name": execution.agent.name,
        "status": execution.status, "channels": list(config.channels), "recipients": list(config.recipients),
        "summary": ((execution.result or {}).get("summary") or "")[:500],
        "user_ids": [execution.requested_by_id] if execution.requested_by_id else [],
    }

    # A notification never changes a finished run.
    call_on_commit(lambda: notify_run_outcome(**kwargs), component="notifications", operation="run outcome",
                   subject=f"execution {execution.pk}")


def memory_write(*, execution_id: int, agent_id=None, result: dict | None = None):
    """Long-term memory from a finished run: summarised, never the raw log. The run's
    agent and result are read unless the caller has them (post-processing has)."""
    if agent_id is None:
        agent_id, result = Execution.objects.values_list("agent_id", "result").get(pk=execution_id)
    result = result or {}
    steps = _MEMORY_STEPS.all(execution_id=execution_id)
    learnings, flagged = [], []
    for row in steps:
        if row.step_type == StepType.OBSERVATION and row.status == StepStatus.FAILED and row.tool_name:
            learnings.append(f"{row.tool_name} failed: {row.error[:160]}")
        if row.status == StepStatus.BLOCKED:
            flagged.append(f"{row.tool_name or 'action'} was blocked: {(row.error or '')[:160]}")
    return agent_memory_record(agent_id=agent_id, execution_id=execution_id,
                               summary=result.get("summary") or "", learnings=learnings, flagged_items=flagged)

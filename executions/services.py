"""Durable runs: start, run a segment under a lease, pause, resume, cancel, finish.

A run is an Execution row plus its appended steps. A Celery task runs a *segment*:
turns back to back until the run ends or pauses. Any worker may pick up a segment
after a crash; it rebuilds the state from the committed steps.
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, InterfaceError, connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.models import Agent, AgentMemory, AgentVersion
from common.dberrors import Backoff, error_is_transient, retry_transient
from datasources.selectors import data_source_prompt_metadata
from executions.journal import DbJournal, event_rows_publish, next_event_seq, step_from_row, step_row
from executions.models import Execution, ExecutionEvent, ExecutionStep
from governance import checker
from governance.audit import audit_record
from governance.selectors import active_policies
from rivercore.contracts import (
    AgentConfig,
    DataSourceMetadata,
    ExecutionRequest,
    ResponseStatus,
    Step,
    StepStatus,
    StepType,
    TriggerContext,
    UserContext,
)
from rivercore.errors import Conflict, InvalidInput
from rivercore.events import (
    approval_required_event,
    approval_resolved_event,
    run_completed_event,
    run_started_event,
)
from rivercore.runner import Engine, Outcome, RunInterrupted, new_state, response_build
from rivercore.state import RunState
from rivercore.types.agents import MemoryEntry
from rivercore.types.governance import Decision, ResolutionStatus
from telemetry.events import events_flush
from telemetry.faults import infra_fault_record
from tenancy.selectors import workspace_permissions, workspace_roles

logger = logging.getLogger("river.executions")

RESOLVE_ATTEMPTS = 5

_STATUS_FROM_RESPONSE = {
    ResponseStatus.SUCCESS: Execution.Status.COMPLETED,
    ResponseStatus.FAILED: Execution.Status.FAILED,
    ResponseStatus.MAX_TURNS_EXCEEDED: Execution.Status.MAX_TURNS_EXCEEDED,
    ResponseStatus.BUDGET_EXCEEDED: Execution.Status.BUDGET_EXCEEDED,
    ResponseStatus.TIMEOUT: Execution.Status.TIMEOUT,
    ResponseStatus.AWAITING_APPROVAL: Execution.Status.AWAITING_APPROVAL,
    ResponseStatus.AWAITING_INTERACTION: Execution.Status.AWAITING_INTERACTION,
}


# --- building the request (context builder inputs) ------------------------------------


def agent_config_build(*, agent: Agent, version: AgentVersion) -> AgentConfig:
    workspace = agent.workspace
    return AgentConfig(
        agent_id=agent.pk,
        name=agent.name,
        business_function=agent.business_function,
        domain=agent.domain or workspace.name,
        goal=version.goal,
        instructions=version.instructions,
        system_prompt=version.system_prompt or None,
        action_level=version.action_level,
        governance_level=version.governance_level,
        model_config=version.model_settings,
        tools=list(version.tools),
        governance_policies=active_policies(org_id=workspace.organization_id, workspace_id=workspace.pk),
        approval_rules=version.rules,
        notification_config=version.notification_config or None,
    )


def user_context_build(*, user, workspace) -> UserContext:
    return UserContext(
        user_id=user.pk,
        org_id=workspace.organization_id,
        workspace_id=workspace.pk,
        roles=workspace_roles(user=user, workspace=workspace),
        permissions=sorted(workspace_permissions(user=user, workspace=workspace)),
        attributes={"time_zone": workspace.time_zone, "observation_byte_limit": workspace.observation_byte_limit},
    )


def data_source_metadata_build(*, version: AgentVersion) -> list[DataSourceMetadata]:
    """Bound sources with their cached schemas (never fetched live, never credentials)."""
    return [
        DataSourceMetadata.model_validate(data_source_prompt_metadata(data_source=source))
        for source in version.data_sources.all().order_by("pk")
    ]


def memory_build(*, agent: Agent, limit: int = 10) -> list[MemoryEntry]:
    entries = AgentMemory.objects.filter(agent=agent).order_by("-created_at")[:limit]
    return [
        MemoryEntry(execution_id=m.execution_id, completed_at=m.created_at.isoformat(), summary=m.summary,
                    learnings=m.learnings, flagged_items=m.flagged_items)
        for m in reversed(list(entries))
    ]


# --- start ---------------------------------------------------------------------------


def execution_start(
    *,
    agent: Agent,
    user,
    input_prompt: str = "",
    payload=None,
    trigger_type: str = "manual",
    trigger_source: str = "ui",
    trigger_id=None,
    parent_execution_id: int | None = None,
) -> Execution:
    """Create a queued run and hand it to a worker after commit (spec steps 1-3)."""
    if agent.status != Agent.Status.ACTIVE:
        logger.warning("run of agent %s refused: agent is %s", agent.pk, agent.status)
        raise InvalidInput(
            f"Agent is {agent.status}; only active agents run.", code="agent_not_active",
            details={"agent": [f"status is {agent.status}"]},
        )
    version = agent.current_version
    if version is None:
        raise InvalidInput("Agent has no deployed version.", code="no_deployed_version")
    workspace = agent.workspace
    with transaction.atomic():
        execution = Execution.objects.create(
            workspace=workspace, agent=agent, agent_version=version, trigger_type=trigger_type,
            trigger_source=trigger_source, trigger_payload=payload if payload is not None else {},
            trigger_id=trigger_id, parent_execution_id=parent_execution_id, requested_by=user,
            input_prompt=input_prompt or "",
        )
        request = ExecutionRequest(
            execution_id=execution.pk,
            agent_config=agent_config_build(agent=agent, version=version),
            user_context=user_context_build(user=user, workspace=workspace),
            input_prompt=input_prompt or None,
            trigger_context=TriggerContext(
                trigger_type=trigger_type, trigger_source=trigger_source, trigger_payload=payload,
                triggered_by=str(user.pk) if user else None, triggered_at=execution.queued_at,
            ),
            data_source_metadata=data_source_metadata_build(version=version),
            conversation_history=memory_build(agent=agent),
        )
        state, detections = _new_state_screened(request)
        execution.context = {
            "request": state.request.model_dump(mode="json", by_alias=True),
            "base_messages": state.base_messages,
            "tool_schemas": state.tool_schemas,
            "security_events": detections,
        }
        execution.published_at = timezone.now()
        execution.save(update_fields=["context", "published_at"])
        if detections:
            _security_event(execution, detections)
        _queue_segment_on_commit(execution.pk)
    return execution


def _new_state_screened(request: ExecutionRequest):
    if not settings.RIVER_PROMPT_INJECTION_DETECTION:
        from rivercore import context as ctxmod

        state = RunState(request=request, base_messages=ctxmod.base_messages(request),
                         tool_schemas=ctxmod.tool_schemas(request))
        return state, []
    return new_state(request)


def _security_event(execution: Execution, detections: list[dict]) -> None:
    logger.warning(
        "security event: possible prompt injection in trigger payload of execution %s (%d span(s) sanitised)",
        execution.pk, len(detections),
    )
    audit_record(
        organization_id=execution.workspace.organization_id, workspace_id=execution.workspace_id,
        event_type="prompt_injection_detected", execution_id=execution.pk, agent_id=execution.agent_id,
        details={"detections": detections},
    )


def _task_send(task, execution_id: int) -> bool:
    """Send a task message for a committed run. A broker that is down is counted and
    logged, never raised: the row is the record, and the watchdog sends the message
    again (a failed publish must not turn a committed start into a 500)."""
    try:
        task.delay(execution_id)
    except Exception as exc:  # noqa: BLE001 - any broker failure; the watchdog recovers the run
        infra_fault_record(component="broker", operation=f"publish {task.name}", exc=exc,
                           subject=f"execution {execution_id}")
        return False
    return True


def _queue_segment_on_commit(execution_id: int) -> None:
    """After commit, send the run's segment. The caller set ``published_at`` in the
    same transaction; if the send fails it is cleared, so the watchdog's next pass
    sends it again instead of waiting out the grace period."""
    from executions.tasks import run_segment

    def send() -> None:
        if _task_send(run_segment, execution_id):
            return
        try:
            Execution.objects.filter(pk=execution_id, status=Execution.Status.QUEUED).update(published_at=None)
        except (DatabaseError, InterfaceError) as exc:  # the grace period covers it
            infra_fault_record(component="database", operation="mark unpublished", exc=exc,
                               subject=f"execution {execution_id}")

    transaction.on_commit(send)


# --- running a segment -----------------------------------------------------------------


def execution_claim(*, execution_id: int) -> str | None:
    """Compare-and-set: take the lease on a queued run, or a running one whose lease
    expired. Returns the lease token, or None when another worker holds the run."""
    token = uuid.uuid4().hex
    now = timezone.now()
    claimed = (
        Execution.objects.filter(pk=execution_id)
        .filter(Q(status=Execution.Status.QUEUED) | Q(status=Execution.Status.RUNNING, lease_expires_at__lt=now))
        .update(
            status=Execution.Status.RUNNING, lease_token=token,
            lease_expires_at=now + timedelta(seconds=settings.RIVER_LEASE_SECONDS),
            attempts=F("attempts") + 1, started_at=Coalesce(F("started_at"), now),
            published_at=None,  # the message that brought us here is consumed
        )
    )
    return token if claimed == 1 else None


def state_load(execution: Execution) -> RunState:
    request = ExecutionRequest.model_validate(execution.context["request"])
    steps = [step_from_row(row) for row in execution.steps.order_by("step_number")]
    started = execution.started_at or execution.queued_at
    return RunState.replay(
        request=request, base_messages=execution.context["base_messages"],
        tool_schemas=execution.context["tool_schemas"], steps=steps,
        started_at_ms=int(started.timestamp() * 1000),
    )


class _LeaseHeartbeat:
    """Renews the lease while a long model or tool call holds the segment."""

    def __init__(self, execution_id: int, token: str):
        self.execution_id = execution_id
        self.token = token
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"lease-{execution_id}", daemon=True)

    def _run(self) -> None:
        interval = max(1.0, settings.RIVER_LEASE_SECONDS / 3)
        try:
            while not self.stop_event.wait(interval):
                try:
                    Execution.objects.filter(
                        pk=self.execution_id, lease_token=self.token, status=Execution.Status.RUNNING
                    ).update(lease_expires_at=timezone.now() + timedelta(seconds=settings.RIVER_LEASE_SECONDS))
                except (DatabaseError, InterfaceError) as exc:
                    # A dropped connection: reconnect at the next beat. If the database
                    # stays away the lease runs out and the journal's fence stops us.
                    infra_fault_record(component="database", operation="lease renewal", exc=exc,
                                       subject=f"execution {self.execution_id}")
                    connection.close()
        finally:
            connection.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(timeout=5)


class _DurableHooks:
    def __init__(self, execution: Execution):
        self.execution = execution

    def tool_context_extras(self) -> dict:
        return {"workspace_id": self.execution.workspace_id}

    def approved_call_failed(self, state, *, call_id, tool_name, error) -> None:
        from governance.approvals import approval_action_failed

        approval_action_failed(execution_id=self.execution.pk, call_id=call_id, error=error)

    def auto_approved(self, state, *, call_id, tool_name, arguments, condition) -> None:
        audit_record(
            organization_id=self.execution.workspace.organization_id, workspace_id=self.execution.workspace_id,
            event_type="approval_auto_approved", execution_id=self.execution.pk, agent_id=self.execution.agent_id,
            details={"tool_name": tool_name, "arguments": arguments, "condition": condition, "call_id": call_id},
        )


def llm_for_execution(execution: Execution):
    from executions.routing import router_for_organization

    return router_for_organization(organization_id=execution.workspace.organization_id)


def execution_run_segment(*, execution_id: int, llm=None) -> str | None:
    """Run turns until the run ends or pauses. Safe to call twice: only the caller
    that wins the lease runs; the other returns at once."""
    try:
        token = execution_claim(execution_id=execution_id)
    except (DatabaseError, InterfaceError) as exc:
        # Nothing was claimed: the run keeps its state and the watchdog sends it again.
        infra_fault_record(component="database", operation="claim", exc=exc, subject=f"execution {execution_id}")
        if not connection.in_atomic_block:
            connection.close()
        return None
    if token is None:
        return None
    try:
        execution = Execution.objects.select_related("workspace", "agent").get(pk=execution_id)
        if execution.attempts > settings.RIVER_MAX_SEGMENT_ATTEMPTS:
            _segment_fail(execution_id, token, _gave_up_message(execution.attempts - 1, execution.infra_error),
                          code="INFRASTRUCTURE_ERROR")
            return ResponseStatus.FAILED.value
        return _segment_run(execution, token, llm)
    except RunInterrupted:
        raise  # another worker holds the run now, or it was cancelled
    except (DatabaseError, InterfaceError) as exc:
        # Infrastructure, not the run: hand the run back to the watchdog (bounded by
        # RIVER_MAX_SEGMENT_ATTEMPTS). If the database is still away the release
        # fails too, and the lease running out does the same job.
        _segment_release(execution_id, token, exc)
        return None
    except Exception as exc:  # noqa: BLE001 - a bug must end the run, not leave it running forever
        logger.exception("segment of execution %s crashed", execution_id)
        _segment_fail(execution_id, token, f"internal error: {exc.__class__.__name__}")
        return ResponseStatus.FAILED.value
    finally:
        # Turns hand their events to the background publisher; the segment is over
        # only when they are out, so whoever waited for it also waited for them.
        events_flush()


def _segment_release(execution_id: int, token: str, exc: BaseException) -> None:
    """Put a run whose segment hit an infrastructure error back in the queue, lease
    dropped and ``published_at`` cleared, so the watchdog's next pass sends it again
    (at most one attempt per pass: a database that is down cannot burn them all)."""
    kind = exc.__class__.__name__
    infra_fault_record(component="database", operation="run segment", exc=exc, subject=f"execution {execution_id}")
    try:
        if not connection.in_atomic_block:  # a worker: drop the connection the error broke
            connection.close_if_unusable_or_obsolete()
        Execution.objects.filter(pk=execution_id, lease_token=token, status=Execution.Status.RUNNING).update(
            status=Execution.Status.QUEUED, lease_token="", lease_expires_at=None, published_at=None,
            infra_error=kind[:200],
        )
    except (DatabaseError, InterfaceError) as again:
        logger.warning("execution %s keeps its lease until it expires: the release failed too (%s)",
                       execution_id, again.__class__.__name__)
        if not connection.in_atomic_block:
            connection.close()


def _run_end_failed(row: Execution, *, code: str, message: str) -> None:
    """End a running or queued run ``failed``: the status, its ``run_completed``
    event and the post-processing in one transaction (caller holds the row lock)."""
    row.status = Execution.Status.FAILED
    row.finished_at = timezone.now()
    row.lease_token = ""
    row.lease_expires_at = None
    row.error = {"code": code, "message": message, "recoverable": False, "details": {}}
    row.save(update_fields=["status", "finished_at", "lease_token", "lease_expires_at", "error"])
    _run_completed_record(row, summary=message)
    _post_process_on_commit(row.pk)


def _run_completed_record(row: Execution, *, summary: str) -> None:
    """Append and publish ``run_completed`` for a run that just ended outside the engine
    (failed, cancelled, expired). Caller holds the row lock, inside its transaction."""
    ended = row.finished_at or timezone.now()
    duration_ms = int((ended - row.started_at).total_seconds() * 1000) if row.started_at else 0
    kind, payload = run_completed_event(status=row.status, duration_ms=max(duration_ms, 0),
                                        turns_used=row.turn_count, final_output_summary=summary)
    event = ExecutionEvent.objects.create(execution=row, seq=next_event_seq(row.pk), event_type=kind,
                                          payload=payload)
    event_rows_publish(row, [event])


def _segment_fail(execution_id: int, token: str, message: str, *, code: str = "AGENT_ERROR") -> None:
    """End a run that cannot go on (caller held its lease)."""
    with transaction.atomic():
        row = Execution.objects.select_for_update().get(pk=execution_id)
        if row.lease_token != token or row.status != Execution.Status.RUNNING:
            return
        _run_end_failed(row, code=code, message=message)


def _gave_up_message(attempts: int, infra_error: str) -> str:
    last = f"; last infrastructure error: {infra_error}" if infra_error else ""
    return (f"gave up after {attempts} segment attempts (workers kept dying or the database or broker "
            f"kept failing{last})")


def _segment_run(execution: Execution, token: str, llm) -> str | None:
    execution_id = execution.pk
    state = state_load(execution)
    journal = DbJournal(execution, token)
    if not state.steps:
        journal.emit(*run_started_event(
            execution_id=execution.pk, agent_id=execution.agent_id,
            trigger_type=execution.trigger_type, started_at=execution.started_at,
        ))
    engine = Engine(
        llm=llm or llm_for_execution(execution), journal=journal, hooks=_DurableHooks(execution), policy=checker,
        tool_thread_exit=lambda: connection.close(),
    )
    try:
        with _LeaseHeartbeat(execution.pk, token):
            outcome = engine.run(state)
            journal.settle()  # the last turn's write is committed before the run's status moves
    except RunInterrupted:
        logger.info("segment of execution %s stopped: cancelled or lease lost", execution_id)
        return None
    finally:
        journal.close()
    execution_segment_end(execution=execution, token=token, state=state, outcome=outcome, next_seq=journal.seq)
    return outcome.status.value


def snapshot_build(state: RunState) -> dict:
    return {
        "messages": state.messages(),
        "pending": state.pending.model_dump(mode="json") if state.pending else None,
        "observations": [s.model_dump(mode="json") for s in state.steps if s.step_type == StepType.OBSERVATION],
        "counters": {
            "turn": state.turn, "tokens_input": state.tokens_input, "tokens_output": state.tokens_output,
            "consecutive_stalls": state.consecutive_stalls, "call_counts": state.call_counts,
            "tool_error_streak": state.tool_error_streak, "intent": state.intent,
        },
        "step_count": len(state.steps),
    }


def execution_segment_end(
    *, execution: Execution, token: str, state: RunState, outcome: Outcome, next_seq: int | None = None
) -> None:
    """Record how the segment ended. ``next_seq`` is the next event sequence number
    when the caller's journal knows it (it held the lease, so nobody else appended)."""
    status = _STATUS_FROM_RESPONSE[outcome.status]
    response = response_build(state, outcome)
    now = timezone.now()
    with transaction.atomic():
        # The built context (prompt, tool schemas) is large and not needed here.
        row = Execution.objects.select_for_update().defer("context").get(pk=execution.pk)
        if row.lease_token != token or row.status != Execution.Status.RUNNING:
            return  # cancelled meanwhile, or another worker took over
        row.status = status
        row.lease_token = ""
        row.lease_expires_at = None
        row.usage = response.usage.model_dump(mode="json")
        fields = ["status", "lease_token", "lease_expires_at", "usage"]
        seq = next_seq if next_seq is not None else next_event_seq(row.pk)
        events = []
        if status in (Execution.Status.AWAITING_APPROVAL, Execution.Status.AWAITING_INTERACTION):
            row.context_snapshot = snapshot_build(state)
            # The segment got through: the attempt bound counts the next segment afresh,
            # so a run with many approvals is not mistaken for one that keeps crashing.
            row.attempts = 0
            row.infra_error = ""
            fields += ["context_snapshot", "attempts", "infra_error"]
            if status == Execution.Status.AWAITING_APPROVAL:
                approval = _approval_open(row, state)
                events.append(approval_required_event(
                    approval_id=approval.pk, tool_name=approval.tool_name, pending_since=approval.created_at,
                ))
        else:
            row.result = response.result.model_dump(mode="json")
            row.error = response.error.model_dump(mode="json") if response.error else None
            row.finished_at = now
            fields += ["result", "error", "finished_at"]
            events.append(run_completed_event(
                status=status, duration_ms=response.usage.execution_duration_ms,
                turns_used=state.turn, final_output_summary=(state.final_answer or "")[:300],
            ))
        row.save(update_fields=fields)
        rows = [ExecutionEvent(execution=row, seq=seq + i, event_type=t, payload=p) for i, (t, p) in enumerate(events)]
        ExecutionEvent.objects.bulk_create(rows)
        event_rows_publish(row, rows)
        if row.is_terminal:
            _post_process_on_commit(row.pk)


def _approval_open(execution: Execution, state: RunState):
    from governance.approvals import approval_request_open

    pending = state.pending
    rules = state.request.agent_config.approval_rules
    return approval_request_open(
        workspace_id=execution.workspace_id, execution_id=execution.pk, agent_id=execution.agent_id,
        call_id=pending.call_id, payload=pending.approval.model_dump(mode="json"),
        approver_roles=rules.approver_roles, escalation_timeout_minutes=rules.escalation_timeout_minutes,
        run_started_by_id=execution.requested_by_id,
    )


# --- resuming, cancelling --------------------------------------------------------------


def _append_and_requeue(*, execution: Execution, expected_status: str, new_steps: list[Step]) -> None:
    """Caller holds the execution row lock (select_for_update)."""
    if execution.status != expected_status:
        raise Conflict(f"Execution is {execution.status}, not {expected_status}.", code="invalid_state")
    ExecutionStep.objects.bulk_create([step_row(execution.pk, s) for s in new_steps])
    execution.status = Execution.Status.QUEUED
    execution.queued_at = execution.published_at = timezone.now()  # the watchdog's lost-message rule counts from here
    execution.save(update_fields=["status", "queued_at", "published_at"])
    _queue_segment_on_commit(execution.pk)


def execution_respond(*, execution: Execution, user, user_response) -> Execution:
    """Answer an ask_user question and resume the run."""
    with transaction.atomic():
        row = Execution.objects.select_for_update().get(pk=execution.pk)
        if row.status != Execution.Status.AWAITING_INTERACTION:
            raise Conflict(f"Execution is {row.status}; it is not waiting for an answer.", code="invalid_state")
        state = state_load(row)
        pending = state.pending
        if pending is None or pending.interaction is None:
            raise Conflict("Execution has no open question.", code="invalid_state")
        _validate_answer(pending.interaction, user_response)
        body = {"user_response": user_response}
        answer = Step(
            step_number=state.next_step_number, step_type=StepType.OBSERVATION, turn=state.turn,
            tool_name="ask_user", tool_category="interaction", call_id=pending.call_id, input=pending.arguments,
            output={"result": body, "_dispatched": True, "summary": str(user_response)[:300],
                    "answered_by": user.pk},
            messages=[{"role": "tool", "tool_call_id": pending.call_id,
                       "content": f"[Tool Result] Tool 'ask_user' returned: {_json(body)}"}],
        )
        _append_and_requeue(execution=row, expected_status=Execution.Status.AWAITING_INTERACTION, new_steps=[answer])
    return row


def _json(value) -> str:
    import json

    return json.dumps(value, default=str, sort_keys=True)


def _validate_answer(interaction, user_response) -> None:
    empty = user_response is None or (isinstance(user_response, str) and not user_response.strip())
    if interaction.required and empty:
        raise InvalidInput("An answer is required.", details={"user_response": ["This question needs an answer."]})
    if interaction.options and not empty:
        chosen = user_response if isinstance(user_response, list) else [user_response]
        unknown = [c for c in chosen if c not in interaction.options]
        if unknown:
            raise InvalidInput(
                "The answer must be one of the offered options.",
                details={"user_response": [f"{u!r} is not one of {interaction.options}" for u in unknown]},
            )


def execution_resume_after_resolution(*, execution_id: int, call_id: str, resolution: dict) -> None:
    """Record an approver's decision as a step and queue the resume. Runs inside the
    caller's transaction, after the audit entry was written."""
    row = Execution.objects.select_for_update().get(pk=execution_id)
    if row.status != Execution.Status.AWAITING_APPROVAL:
        raise Conflict(f"Execution is {row.status}; it is not waiting for approval.", code="invalid_state")
    next_number = (row.steps.order_by("-step_number").values_list("step_number", flat=True).first() or 0) + 1
    decision = Step(
        step_number=next_number, step_type=StepType.GOVERNANCE_CHECK, turn=row.turn_count,
        call_id=call_id, tool_name=resolution.get("tool_name"), status=StepStatus.COMPLETED,
        governance_decision=Decision.BLOCKED if resolution["status"] == ResolutionStatus.REJECTED else Decision.PROCEED,
        output={"resolution": resolution},
    )
    _append_and_requeue(execution=row, expected_status=Execution.Status.AWAITING_APPROVAL, new_steps=[decision])
    seq = next_event_seq(row.pk)
    kind, payload = approval_resolved_event(
        approval_id=resolution.get("approval_id"), resolution=resolution["status"],
        resolved_by=resolution.get("resolved_by"),
    )
    event = ExecutionEvent.objects.create(execution=row, seq=seq, event_type=kind, payload=payload)
    event_rows_publish(row, [event])


def execution_cancel(*, execution: Execution, user) -> Execution:
    with transaction.atomic():
        row = Execution.objects.select_for_update().get(pk=execution.pk)
        if row.is_terminal:
            raise Conflict(f"Execution already ended ({row.status}).", code="invalid_state")
        row.status = Execution.Status.CANCELLED
        row.finished_at = timezone.now()
        row.lease_token = ""
        row.lease_expires_at = None
        row.error = {"code": "CANCELLED", "message": f"Cancelled by {user.get_username()}", "recoverable": False,
                     "details": {}}
        row.save(update_fields=["status", "finished_at", "lease_token", "lease_expires_at", "error"])
        from governance.approvals import approvals_close_for_execution

        approvals_close_for_execution(execution_id=row.pk, reason="run cancelled")
        _run_completed_record(row, summary="cancelled")
        _post_process_on_commit(row.pk)
    return row


def execution_end_expired(*, execution_id: int) -> None:
    """The approval expired: the run ends ``approval_expired`` (caller audited it)."""
    row = Execution.objects.select_for_update().get(pk=execution_id)
    if row.status != Execution.Status.AWAITING_APPROVAL:
        return
    row.status = Execution.Status.APPROVAL_EXPIRED
    row.finished_at = timezone.now()
    row.error = {"code": "APPROVAL_EXPIRED", "message": "The approval request expired.", "recoverable": False,
                 "details": {}}
    row.save(update_fields=["status", "finished_at", "error"])
    _run_completed_record(row, summary="approval expired")
    _post_process_on_commit(row.pk)


# --- watchdog --------------------------------------------------------------------------


def executions_requeue_stale(*, grace_seconds: int | None = None) -> list[int]:
    """Send the segment of every run no worker will otherwise pick up; returns their ids.

    - running with an expired lease: its worker died or lost the database;
    - queued: its message was never sent (a failed send) or is lost (Redis restarted
      without persistence, a worker was killed holding it).

    ``published_at`` is when a message was last sent and is cleared by the claim that
    consumes it, so each such run is sent once, and again only when that message is
    older than the grace without having been claimed.

    A run that already used ``RIVER_MAX_SEGMENT_ATTEMPTS`` claims is ended ``failed``
    here instead, with its ``run_completed`` event and post-processing. Sending twice
    is harmless: only the compare-and-set claim runs a segment.
    """
    grace = settings.RIVER_WATCHDOG_GRACE_SECONDS if grace_seconds is None else grace_seconds
    now = timezone.now()
    unclaimed = Q(published_at__isnull=True) | Q(published_at__lt=now - timedelta(seconds=grace))
    orphaned = Q(status=Execution.Status.RUNNING, lease_expires_at__lt=now) | Q(status=Execution.Status.QUEUED)
    candidates = list(Execution.objects.filter(orphaned & unclaimed).values_list("pk", "attempts")[:500])
    exhausted = [pk for pk, attempts in candidates if attempts >= settings.RIVER_MAX_SEGMENT_ATTEMPTS]
    for execution_id in exhausted:
        _watchdog_step("fail", execution_fail_exhausted, execution_id)
    stale = [pk for pk, attempts in candidates if attempts < settings.RIVER_MAX_SEGMENT_ATTEMPTS]
    if not stale:
        return []
    # Same conditions again: a run claimed since the select keeps published_at NULL.
    Execution.objects.filter(orphaned & unclaimed, pk__in=stale).update(published_at=now)
    from executions.tasks import run_segment

    sent = [execution_id for execution_id in stale if _task_send(run_segment, execution_id)]
    logger.warning("watchdog re-sent %d of %d stale execution(s): %s", len(sent), len(stale), stale[:20])
    return stale


def _watchdog_step(what: str, service, execution_id: int) -> bool:
    """One run's step of a watchdog pass; a run that keeps failing it is logged and
    never stops the pass for the others."""
    try:
        return service(execution_id=execution_id)
    except Exception:  # noqa: BLE001 - logged with its traceback; the next pass tries again
        logger.exception("watchdog could not %s execution %s", what, execution_id)
        return False


def execution_fail_exhausted(*, execution_id: int) -> bool:
    """The watchdog ends a run that is out of segment attempts and that no worker
    holds (lease expired, or queued). Returns whether it ended it."""
    now = timezone.now()
    with transaction.atomic():
        row = Execution.objects.select_for_update().defer("context").filter(pk=execution_id).first()
        if row is None or row.attempts < settings.RIVER_MAX_SEGMENT_ATTEMPTS:
            return False
        held = row.status == Execution.Status.RUNNING and row.lease_expires_at is not None \
            and row.lease_expires_at >= now
        if row.status not in (Execution.Status.RUNNING, Execution.Status.QUEUED) or held:
            return False
        _run_end_failed(row, code="INFRASTRUCTURE_ERROR", message=_gave_up_message(row.attempts, row.infra_error))
    logger.warning("watchdog failed execution %s: out of segment attempts", execution_id)
    return True


def executions_post_process_missed(*, grace_seconds: int | None = None, limit: int = 200) -> list[int]:
    """Post-process finished runs whose ``post_process`` message was lost (broker down
    at commit, Redis restarted, worker killed). The claim inside makes it once only."""
    grace = settings.RIVER_WATCHDOG_GRACE_SECONDS if grace_seconds is None else grace_seconds
    missed = list(
        Execution.objects.filter(
            status__in=Execution.TERMINAL, post_processed_at__isnull=True,
            finished_at__lt=timezone.now() - timedelta(seconds=grace),
        ).order_by("finished_at").values_list("pk", flat=True)[:limit]
    )
    done = [execution_id for execution_id in missed
            if _watchdog_step("post-process", execution_post_process, execution_id)]
    if done:
        logger.warning("watchdog post-processed %d finished execution(s) whose task was lost: %s",
                       len(done), done[:20])
    return done


# --- post-execution processing -----------------------------------------------------------


def _post_process_on_commit(execution_id: int) -> None:
    """Send ``post_process`` after commit; if the broker is down the watchdog's
    ``executions_post_process_missed`` does it after the grace period."""
    from executions.tasks import post_process

    transaction.on_commit(lambda: _task_send(post_process, execution_id))


HEALTH_DEGRADED_AFTER = 3
HEALTH_CRITICAL_AFTER = 5
_SUCCESS = {Execution.Status.COMPLETED}
_NEUTRAL = {Execution.Status.CANCELLED, Execution.Status.APPROVAL_EXPIRED}


def execution_post_process(*, execution_id: int) -> bool:
    """Spec step 9, exactly once per run: health, memory write-back, notifications.
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
        execution = Execution.objects.select_related("agent", "workspace", "agent_version").get(pk=execution_id)
        agent_health_update(agent_id=execution.agent_id, status=execution.status, execution_id=execution.pk)
        if execution.status == Execution.Status.COMPLETED:
            _memory_write_best_effort(execution_id)
        _notify_outcome(execution)
    return True


def _memory_write_best_effort(execution_id: int) -> None:
    """Memory is best effort: a failure is logged and rolled back to its savepoint,
    and never changes the run or the rest of its post-processing."""
    try:
        with transaction.atomic():
            memory_write(execution_id=execution_id)
    except Exception:  # noqa: BLE001 - memory is best-effort by design
        logger.exception("memory write-back failed for execution %s (run status unchanged)", execution_id)


def agent_health_update(*, agent_id, status: str, execution_id: int) -> None:
    if status in _NEUTRAL:
        return
    with transaction.atomic():
        agent = Agent.objects.select_for_update().select_related("workspace").get(pk=agent_id)
        before = agent.health
        if status in _SUCCESS:
            agent.consecutive_failures = 0
        else:
            agent.consecutive_failures += 1
        failures = agent.consecutive_failures
        if failures >= HEALTH_CRITICAL_AFTER:
            agent.health = Agent.Health.CRITICAL
        elif failures >= HEALTH_DEGRADED_AFTER:
            agent.health = Agent.Health.DEGRADED
        else:
            agent.health = Agent.Health.HEALTHY
        agent.save(update_fields=["consecutive_failures", "health", "updated_at"])
        if agent.health != before:
            audit_record(
                organization_id=agent.workspace.organization_id, workspace_id=agent.workspace_id,
                event_type="agent_health_changed", agent_id=agent.pk, execution_id=execution_id,
                details={"from": before, "to": agent.health, "consecutive_failures": failures},
            )


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

    def send() -> None:
        try:
            notify_run_outcome(**kwargs)
        except Exception:  # noqa: BLE001 - a notification never changes a finished run
            logger.exception("outcome notification for execution %s failed", execution.pk)

    transaction.on_commit(send)


def memory_write(*, execution_id: int) -> AgentMemory | None:
    """Long-term memory from a finished run: summarised, never the raw log."""
    execution = Execution.objects.get(pk=execution_id)
    result = execution.result or {}
    steps = list(execution.steps.filter(step_type__in=[StepType.OBSERVATION, StepType.GOVERNANCE_CHECK])
                 .order_by("step_number"))
    learnings, flagged = [], []
    for row in steps:
        if row.step_type == StepType.OBSERVATION and row.status == StepStatus.FAILED and row.tool_name:
            learnings.append(f"{row.tool_name} failed: {row.error[:160]}")
        if row.status == StepStatus.BLOCKED:
            flagged.append(f"{row.tool_name or 'action'} was blocked: {(row.error or '')[:160]}")
    summary = (result.get("summary") or "")[:1000]
    memory, _ = AgentMemory.objects.update_or_create(
        execution_id=execution.pk,
        defaults={"agent_id": execution.agent_id, "summary": summary, "learnings": learnings[:10],
                  "flagged_items": flagged[:10]},
    )
    return memory



# --- approvals ---------------------------------------------------------------------------


def execution_approval_resolve(
    *, user, approval_id, status: str, modified_args: dict | None = None, comment: str = ""
):
    """Approve, reject or edit-and-approve a paused call, then resume its run.

    Exactly once: the request row is locked and must still be pending; the audit
    entry is written before the resume is queued (on commit). Locks are taken run
    first, then its approval request (as cancelling and expiring do), so concurrent
    resolutions, a cancel and the expiry sweep queue up instead of deadlocking; a
    transient database error (deadlock victim, serialization failure, dropped
    connection) rolls the attempt back and it is tried again, so a caller gets a
    decision or a 409, never a 500."""
    import pydantic

    from governance.approvals import approval_authorize, approval_decide, approval_get_for_user
    from rivercore.errors import pydantic_details
    from rivercore.tools import get_tool

    approval = approval_get_for_user(user=user, approval_id=approval_id)
    # Checked again under the row lock; here so a non-approver learns 403, not 400.
    approval_authorize(user=user, approval=approval)
    if approval.status != approval.Status.PENDING:
        raise Conflict(f"This approval request is already {approval.status}.", code="already_resolved")
    if status == ResolutionStatus.EDITED_APPROVED:
        tool = get_tool(approval.tool_name)
        if tool is None:
            raise Conflict(f"Tool {approval.tool_name!r} is no longer available; approve or reject instead.",
                           code="tool_unavailable")
        if not isinstance(modified_args, dict) or not modified_args:
            raise InvalidInput("modified_args is required to edit.", details={"modified_args": ["required"]})
        try:
            modified_args = tool.input_model.model_validate(modified_args).model_dump(mode="json", exclude_none=True)
        except pydantic.ValidationError as exc:
            raise InvalidInput(
                "The edited arguments do not fit the tool's schema.",
                details={f"modified_args.{k}": v for k, v in pydantic_details(exc).items()},
            ) from None
    else:
        modified_args = None  # only an edit carries arguments

    def decide_and_resume():
        with transaction.atomic():
            Execution.objects.select_for_update().filter(pk=approval.execution_id).values_list("pk").first()
            decided = approval_decide(
                approval_id=approval.pk, user=user, status=status, modified_args=modified_args, comment=comment
            )
            execution_resume_after_resolution(
                execution_id=decided.execution_id, call_id=decided.tool_call_id,
                resolution={**decided.resolution, "approval_id": str(decided.pk), "tool_name": decided.tool_name},
            )
        return decided

    # Inside a caller's transaction a failed attempt cannot be replayed here.
    attempts = 1 if connection.in_atomic_block else RESOLVE_ATTEMPTS
    return retry_transient(decide_and_resume, backoff=Backoff(attempts=attempts, base_seconds=0.02, cap_seconds=0.5),
                           is_transient=error_is_transient)


def approvals_expire_due() -> int:
    """Periodic: expire overdue requests and end their runs ``approval_expired``."""
    from governance.approvals import approval_expire, approvals_overdue
    from governance.models import ApprovalRequest

    expired = 0
    for approval_id in approvals_overdue():
        execution_id = ApprovalRequest.objects.filter(pk=approval_id).values_list("execution_id", flat=True).first()
        with transaction.atomic():
            # Run first, then its request (the order resolving and cancelling use); a
            # run being resolved right now is skipped and looked at next sweep.
            locked = (Execution.objects.select_for_update(skip_locked=True).filter(pk=execution_id)
                      .values_list("pk", flat=True).first())
            if locked is None and Execution.objects.filter(pk=execution_id).exists():
                continue
            approval = approval_expire(approval_id=approval_id)
            if approval is None:
                continue
            if locked is not None:  # None: the run is gone, only its request was left
                execution_end_expired(execution_id=approval.execution_id)
            expired += 1
    return expired

"""Running a segment: claim the run's lease, replay its committed steps, run the loop
until it ends or pauses, and record how the segment ended. Any worker may pick up a
segment after a crash; it rebuilds the state from the committed steps."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time

from django.conf import settings
from django.db import DatabaseError, InterfaceError, connection, transaction
from django.utils import timezone

from common.compiled import CompiledQuery
from executions.journal import DbJournal, event_rows_publish, next_event_seq, run_status_message, step_from_row
from executions.models import Execution, ExecutionEvent, ExecutionSegment, ExecutionStep
from executions.runhost import leases_renew
from executions.services.claim import execution_claim_load
from executions.services.finish import gave_up_message, run_end, run_end_failed, run_end_leased, segment_close
from executions.services.load import run_state_build
from executions.services.notify import run_paused_for_approval_notify, run_question_notify
from governance import checker
from governance.audit import audit_record
from rivercore.contracts import (
    ResponseStatus,
    StepType,
)
from rivercore.events import (
    approval_required_event,
    run_started_event,
)
from rivercore.ports import blocking_call, drive
from rivercore.runner import Engine, Outcome, RunInterrupted, response_build
from rivercore.state import RunState
from telemetry import traces
from telemetry.events import RunPartials, events_publish
from telemetry.faults import infra_fault_record

logger = logging.getLogger("river.executions")

_STATUS_FROM_RESPONSE = {
    ResponseStatus.SUCCESS: Execution.Status.COMPLETED,
    ResponseStatus.FAILED: Execution.Status.FAILED,
    ResponseStatus.MAX_TURNS_EXCEEDED: Execution.Status.MAX_TURNS_EXCEEDED,
    ResponseStatus.BUDGET_EXCEEDED: Execution.Status.BUDGET_EXCEEDED,
    ResponseStatus.TIMEOUT: Execution.Status.TIMEOUT,
    ResponseStatus.AWAITING_APPROVAL: Execution.Status.AWAITING_APPROVAL,
    ResponseStatus.AWAITING_INTERACTION: Execution.Status.AWAITING_INTERACTION,
    ResponseStatus.AWAITING_CHILD: Execution.Status.AWAITING_CHILD,
}


_UNKNOWN = object()

# A run's steps in order, the query every segment but a run's first makes (a resumed
# run's, for one), compiled once per process (common.compiled).
_STEPS = CompiledQuery(
    lambda execution_id: ExecutionStep.objects.filter(execution_id=execution_id).order_by("step_number"),
    execution_id=-(2**62) + 43,
)


def state_load(execution: Execution) -> RunState:
    """The run's state: its request and prompt, and its committed steps replayed (not
    read at all when the load found none, ``last_step``)."""
    fresh = run_state_build(execution)
    if getattr(execution, "last_step", _UNKNOWN) is None:
        steps = []
    else:
        steps = [step_from_row(row) for row in _STEPS.all(execution_id=execution.pk)]
    # A claimed run counts its time limit from this segment's start plus what its earlier
    # segments ran (the claim read both); a run loaded without a claim (a resume's check,
    # a replay) from its first start.
    started = getattr(execution, "segment_started_at", None) or execution.started_at or execution.queued_at
    return RunState.replay(
        request=fresh.request, base_messages=fresh.base_messages, tool_schemas=fresh.tool_schemas, steps=steps,
        started_at_ms=int(started.timestamp() * 1000),
        active_before_ms=int(getattr(execution, "active_before_ms", 0) or 0),
    )


class _LeaseHeartbeats:
    """Renews the leases of the segments this process runs inline (a hosted run's lease
    is renewed by its host): one thread per process, started on first use and again in a
    forked child, one statement for all of them every third of the lease. A segment
    registers its lease for as long as it runs instead of starting a thread of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: dict[int, str] = {}
        self._wake = threading.Condition(self._lock)
        self._pid: int | None = None

    @contextlib.contextmanager
    def held(self, execution_id: int, token: str):
        with self._lock:
            self._leases[execution_id] = token
            if self._pid != os.getpid():  # first use here, or a forked child without the thread
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="lease-heartbeat", daemon=True).start()
            if len(self._leases) == 1:  # the thread waits for a first lease; else its beat is set
                self._wake.notify()
        try:
            yield
        finally:
            with self._lock:
                if self._leases.get(execution_id) == token:
                    del self._leases[execution_id]

    def _run(self) -> None:
        while True:
            leases = self._next_beat()
            try:
                leases_renew(leases)
            except (DatabaseError, InterfaceError) as exc:
                # A dropped connection: reconnect at the next beat. If the database
                # stays away the leases run out and the journals' fence stops the runs.
                infra_fault_record(component="database", operation="lease renewal", exc=exc,
                                   subject=f"{len(leases)} inline run(s)")
            finally:
                connection.close()  # no idle session between beats

    def _next_beat(self) -> dict[int, str]:
        """Wait for the next beat: a third of the lease after the first lease held since
        the last one (a new lease can bring the beat forward, never push it back)."""
        beat_at: float | None = None
        with self._lock:
            while True:
                now = time.monotonic()
                if not self._leases:
                    beat_at = None
                    self._wake.wait()
                    continue
                soonest = now + max(1.0, settings.RIVER_LEASE_SECONDS / 3)
                beat_at = soonest if beat_at is None else min(beat_at, soonest)
                if now >= beat_at:
                    return dict(self._leases)
                self._wake.wait(beat_at - now)


_heartbeats = _LeaseHeartbeats()


class _DurableHooks:
    def __init__(self, execution: Execution):
        self.execution = execution

    def tool_context_extras(self) -> dict:
        # durable_execution: this run has a row to pause on (delegate_to_agent needs one).
        return {"workspace_id": self.execution.workspace_id, "durable_execution": True}

    def approved_call_failed(self, state, *, call_id, tool_name, error) -> None:
        from governance.approvals import approval_action_failed

        approval_action_failed(execution_id=self.execution.pk, call_id=call_id, error=error)

    def standing_approval(self, state, *, call_id, tool_name, arguments, preview=None) -> dict | None:
        """Scopes: governance.grants decides and audits; this only says which run and
        which conversation the call is in."""
        from governance.grants import standing_approval_find

        execution = self.execution
        session_runs = (Execution.objects.filter(session_id=execution.session_id).values("pk")
                        if execution.session_id else None)
        return standing_approval_find(
            workspace_id=execution.workspace_id, agent_id=execution.agent_id, execution_id=execution.pk,
            session_execution_ids=session_runs, requester_id=execution.requester_id, call_id=call_id,
            tool_name=tool_name, arguments=arguments, preview=preview)

    def auto_approved(self, state, *, call_id, tool_name, arguments, condition) -> None:
        audit_record(
            organization_id=self.execution.workspace.organization_id, workspace_id=self.execution.workspace_id,
            event_type="approval_auto_approved", execution_id=self.execution.pk, agent_id=self.execution.agent_id,
            details={"tool_name": tool_name, "arguments": arguments, "condition": condition, "call_id": call_id},
        )


def llm_for_execution(execution: Execution):
    from executions.routing import router_for_organization

    # The claim found whether the organization has providers of its own; without, the
    # settings' model or the offline planner serves it and there is nothing to read.
    return router_for_organization(organization_id=execution.workspace.organization_id,
                                   has_providers=getattr(execution, "has_providers", True))


def _io(hosted: bool, fn, *args, **kwargs):
    """A blocking call from a segment's coroutine: inline for a segment run inside its
    caller (driven without an event loop), off the loop on the host's I/O thread for a
    hosted one."""
    return blocking_call(not hosted, fn, *args, **kwargs)


def _claim(execution_id: int) -> tuple[str, Execution] | None:
    """Claim and load the run. A ``run_started`` event the claim wrote is published here,
    on the thread that committed it, before anything else of the segment: a hosted
    run's next blocking call waits for a free I/O thread behind the other hosted runs'
    work, and the event must not wait with it."""
    try:
        claimed = execution_claim_load(execution_id=execution_id)
    except (DatabaseError, InterfaceError) as exc:
        # Nothing was claimed: the run keeps its state and the watchdog sends it again.
        infra_fault_record(component="database", operation="claim", exc=exc, subject=f"execution {execution_id}")
        if not connection.in_atomic_block:
            connection.close()
        return None
    if claimed is not None and claimed[1].started_event is not None:
        event_rows_publish(claimed[1], [claimed[1].started_event])  # at once when committed, else with the commit
    return claimed


def execution_run_segment(*, execution_id: int, llm=None) -> str | None:
    """Run turns until the run ends or pauses, in the caller. Safe to call twice: only
    the caller that wins the lease runs; the other returns at once."""
    claimed = _claim(execution_id)
    if claimed is None:
        return None
    token, execution = claimed
    return drive(_segment_guarded(execution, token, llm, hosted=False))


def execution_host_segment(*, execution_id: int, host) -> bool:
    """Hand the run to this process's run host and return once it is handed over: the
    host claims the run on its I/O threads and runs its segment (nothing, if another
    worker holds the run). The task thread only waits for a place on the host, never on
    the database, so a worker takes its next message at once."""
    host.reserve()
    host.start(_claim_then_run(execution_id, host), execution_id=execution_id)
    return True


async def _claim_then_run(execution_id: int, host) -> str | None:
    claimed = await _io(True, _claim, execution_id)
    if claimed is None:
        return None
    token, execution = claimed
    host.hold(execution_id, token)
    return await _segment_guarded(execution, token, None, hosted=True)


async def _segment_guarded(execution: Execution, token: str, llm, *, hosted: bool) -> str | None:
    execution_id = execution.pk
    try:
        if execution.attempts > settings.RIVER_MAX_SEGMENT_ATTEMPTS:
            await _io(hosted, _segment_fail, execution_id, token,
                      gave_up_message(execution.attempts - 1, execution.infra_error), code="INFRASTRUCTURE_ERROR")
            return ResponseStatus.FAILED.value
        return await _segment_run(execution, token, llm, hosted=hosted)
    except RunInterrupted:
        raise  # another worker holds the run now, or it was cancelled
    except (DatabaseError, InterfaceError) as exc:
        # Infrastructure, not the run: hand the run back to the watchdog (bounded by
        # RIVER_MAX_SEGMENT_ATTEMPTS). If the database is still away the release
        # fails too, and the lease running out does the same job.
        await _io(hosted, _segment_release, execution_id, token, exc)
        return None
    except Exception as exc:  # noqa: BLE001 - a bug must end the run, not leave it running forever
        logger.exception("segment of execution %s crashed", execution_id)
        await _io(hosted, _segment_fail, execution_id, token, f"internal error: {exc.__class__.__name__}")
        return ResponseStatus.FAILED.value


def _segment_release(execution_id: int, token: str, exc: BaseException) -> None:
    """Put a run whose segment hit an infrastructure error back in the queue, lease
    dropped and ``published_at`` cleared, so the watchdog's next pass sends it again
    (at most one attempt per pass: a database that is down cannot burn them all)."""
    kind = exc.__class__.__name__
    infra_fault_record(component="database", operation="run segment", exc=exc, subject=f"execution {execution_id}")
    try:
        if not connection.in_atomic_block:  # a worker: drop the connection the error broke
            connection.close_if_unusable_or_obsolete()
        with transaction.atomic():
            released = Execution.objects.filter(pk=execution_id, lease_token=token,
                                                status=Execution.Status.RUNNING).update(
                status=Execution.Status.QUEUED, lease_token="", lease_expires_at=None, published_at=None,
                infra_error=kind[:200],
            )
            if released:
                segment_close(execution_id=execution_id, ended_at=timezone.now(),
                              ended_as=ExecutionSegment.EndedAs.INTERRUPTED, measure=False)
    except (DatabaseError, InterfaceError) as again:
        logger.warning("execution %s keeps its lease until it expires: the release failed too (%s)",
                       execution_id, again.__class__.__name__)
        if not connection.in_atomic_block:
            connection.close()


def _segment_fail(execution_id: int, token: str, message: str, *, code: str = "AGENT_ERROR") -> None:
    """End a run that cannot go on (caller held its lease)."""
    with transaction.atomic():
        row = Execution.objects.select_for_update().get(pk=execution_id)
        if row.lease_token != token or row.status != Execution.Status.RUNNING:
            return
        run_end_failed(row, code=code, message=message)


async def _segment_run(execution: Execution, token: str, llm, *, hosted: bool) -> str | None:
    execution_id = execution.pk
    state = await _io(hosted, state_load, execution)
    if traces.tracing_enabled():
        await _io(hosted, _segment_trace_begin, execution, state)
    try:
        status = await _segment_loop(execution, token, llm, state, hosted=hosted)
    except BaseException as exc:
        traces.segment_trace_end(execution_id=execution_id, status=None, error=exc)
        raise
    traces.segment_trace_end(execution_id=execution_id, status=status)
    return status


def _segment_trace_begin(execution: Execution, state: RunState) -> None:
    """Open the segment's execution span under the run's trace; the run's first traced
    segment stores its root (caller holds the lease, so nobody else writes it). A
    delegated run's root hangs under the parent's span that started it."""
    delegation = ((execution.context or {}).get("delegation") or {}) if not execution.traceparent else {}
    root = traces.segment_trace_begin(
        execution_id=execution.pk, agent_id=execution.agent_id,
        action_level=state.request.agent_config.action_level.value, traceparent=execution.traceparent,
        parent_traceparent=str(delegation.get("parent_traceparent") or ""),
    )
    if root:
        Execution.objects.filter(pk=execution.pk, traceparent="").update(traceparent=root)
        execution.traceparent = root


async def _segment_loop(execution: Execution, token: str, llm, state: RunState, *, hosted: bool) -> str | None:
    execution_id = execution.pk
    # A hosted run writes each turn on the host's shared connection; a run driven by its
    # caller may keep a write-behind connection of its own for the segment.
    journal = await _io(hosted, DbJournal, execution, token, write_behind=False if hosted else None,
                        seq=(execution.last_seq or 0) + 1)
    if execution.started_event is None and not state.steps:  # one the claim wrote went out with it (_claim)
        journal.emit(*run_started_event(
            execution_id=execution.pk, agent_id=execution.agent_id,
            trigger_type=execution.trigger_type, started_at=execution.started_at,
        ))
    engine = Engine(
        llm=llm or await _io(hosted, llm_for_execution, execution), journal=journal, hooks=_DurableHooks(execution),
        policy=checker, tool_thread_exit=lambda: connection.close(), blocking=not hosted,
        partials=RunPartials(execution.pk, session_id=execution.session_id),
    )
    try:
        # A hosted run's lease is renewed by the host's heartbeat, with every other one.
        with contextlib.nullcontext() if hosted else _heartbeats.held(execution.pk, token):
            outcome = await engine.arun(state)
            await _io(hosted, journal.settle)  # the last turn's write is committed before the run's status moves
    except RunInterrupted:
        logger.info("segment of execution %s stopped: cancelled or lease lost", execution_id)
        return None
    finally:
        await _io(hosted, journal.close)
    await _io(hosted, execution_segment_end, execution=execution, token=token, state=state, outcome=outcome,
              next_seq=journal.seq)
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
    when the caller's journal knows it (it held the lease, so nobody else appended).

    The run's duration (``usage.execution_duration_ms``, ``run_completed``'s
    ``duration_ms``) is its active time: the segments before this one (the claim read
    them) and this one up to now, never the waits between them."""
    status = _STATUS_FROM_RESPONSE[outcome.status]
    response = response_build(state, outcome)
    now = timezone.now()
    active_ms = _active_ms(execution, now)
    if active_ms is not None:
        response.usage.execution_duration_ms = active_ms
    if status in Execution.TERMINAL and next_seq is not None:
        run_end_leased(execution, token=token, status=status, summary=(state.final_answer or "")[:300],
                       error=response.error.model_dump(mode="json") if response.error else None,
                       result=response.result.model_dump(mode="json"), usage=response.usage.model_dump(mode="json"),
                       duration_ms=response.usage.execution_duration_ms, turns=state.turn, seq=next_seq,
                       steps=state.steps, now=now)
        return
    with transaction.atomic():
        # The built context (prompt, tool schemas) is large and not needed here.
        row = Execution.objects.select_for_update().defer("context").get(pk=execution.pk)
        if row.lease_token != token or row.status != Execution.Status.RUNNING:
            return  # cancelled meanwhile, or another worker took over
        seq = next_seq if next_seq is not None else next_event_seq(row.pk)
        if status not in Execution.PAUSED:
            run_end(row, status=status, summary=(state.final_answer or "")[:300],
                    error=response.error.model_dump(mode="json") if response.error else None,
                    result=response.result.model_dump(mode="json"), usage=response.usage.model_dump(mode="json"),
                    duration_ms=active_ms, turns=state.turn, seq=seq,
                    steps=state.steps)
            return
        segment_close(execution_id=row.pk, ended_at=now, ended_as=status, measure=False)
        row.status = status
        row.lease_token = ""
        row.lease_expires_at = None
        row.usage = response.usage.model_dump(mode="json")
        row.context_snapshot = snapshot_build(state)
        # The segment got through: the attempt bound counts the next segment afresh,
        # so a run with many approvals is not mistaken for one that keeps crashing.
        row.attempts = 0
        row.infra_error = ""
        row.save(update_fields=["status", "lease_token", "lease_expires_at", "usage", "context_snapshot", "attempts",
                                "infra_error"])
        if status == Execution.Status.AWAITING_APPROVAL:
            approval = _approval_open(row, state)
            kind, payload = approval_required_event(
                approval_id=approval.pk, tool_name=approval.tool_name, pending_since=approval.created_at,
            )
            event = ExecutionEvent.objects.create(execution=row, seq=seq, event_type=kind, payload=payload)
            event_rows_publish(row, [event])
            run_paused_for_approval_notify(row, approval=approval)
        else:  # a question or a child: no event of its own marks the pause, so the status says it
            events_publish(workspace_id=row.workspace_id, execution_id=row.pk, session_id=row.session_id,
                           events=[run_status_message(row, last_event_seq=seq - 1)])
        if status == Execution.Status.AWAITING_INTERACTION and state.pending and state.pending.interaction:
            run_question_notify(row, call_id=state.pending.call_id, question=state.pending.interaction.message)
        if status == Execution.Status.AWAITING_CHILD:
            from executions.services.delegation import delegation_resume_if_ended

            # The child may have ended while this segment was still running: its run-end
            # handler then found this run not yet waiting and left it to us.
            delegation_resume_if_ended(parent=row, child_execution_id=state.pending.child_execution_id
                                       if state.pending else None)


def _active_ms(execution: Execution, now) -> int | None:
    """The run's active milliseconds at ``now``, from what its claim read (None for a
    run not loaded by a claim: the end reads its segments instead)."""
    started = getattr(execution, "segment_started_at", None)
    if started is None:
        return None
    return int(getattr(execution, "active_before_ms", 0) or 0) + max(int((now - started).total_seconds() * 1000), 0)


def _approval_open(execution: Execution, state: RunState):
    from governance.approvals import approval_request_open

    pending = state.pending
    rules = state.request.agent_config.approval_rules
    return approval_request_open(
        workspace_id=execution.workspace_id, execution_id=execution.pk, agent_id=execution.agent_id,
        call_id=pending.call_id, payload=pending.approval.model_dump(mode="json"),
        approver_roles=rules.approver_roles, escalation_timeout_minutes=rules.escalation_timeout_minutes,
        # Segregation of duties follows the person answerable for the run (its requester:
        # the clicker, a key's owner, a trigger's responsible person, the parent, upstream
        # run's or session's person), never the identity it acts as.
        run_started_by_id=execution.requester_id,
        approval_rules=rules,  # quorum and escalation chain (governance.quorum)
    )

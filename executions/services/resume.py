"""Resuming a paused run (an answer to ``ask_user``, an approver's decision) and
cancelling one. The new step is appended and the run queued again after commit."""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import OuterRef, Subquery

from common.compiled import CompiledQuery
from executions.journal import event_rows_publish, next_event_seq
from executions.models import Execution, ExecutionEvent, ExecutionStep
from executions.services.finish import run_end_cancelled, verdict_trace_on_commit
from executions.services.notify import run_question_answered
from executions.services.queue import steps_append_and_requeue
from executions.services.segment import state_load
from rivercore.errors import Conflict
from rivercore.events import (
    RunEventType,
    approval_resolved_event,
    interaction_resolved_event,
)
from rivercore.steps import answer_check, answer_step, resolution_step

logger = logging.getLogger("river.executions")

def execution_respond(*, execution: Execution, user, user_response) -> Execution:
    """Answer an ask_user question and resume the run. Decided once, here: the row lock
    orders concurrent answers (two tabs, two people), the first moves the run on, and
    every later one finds it no longer waiting and gets a 409 naming who answered."""
    with transaction.atomic():
        row = Execution.objects.select_for_update().get(pk=execution.pk)
        if row.status != Execution.Status.AWAITING_INTERACTION:
            raise _not_waiting_for_an_answer(row)
        state = state_load(row)
        pending = state.pending
        if pending is None or pending.interaction is None:
            raise Conflict("Execution has no open question.", code="invalid_state")
        answer_check(pending.interaction, user_response)
        answer = answer_step(step_number=state.next_step_number, turn=state.turn, call_id=pending.call_id,
                             arguments=pending.arguments, answer=user_response, answered_by=user.pk)
        steps_append_and_requeue(execution=row, expected_status=Execution.Status.AWAITING_INTERACTION,
                                 new_steps=[answer])
        kind, payload = interaction_resolved_event(turn=state.turn, call_id=pending.call_id, resolution="answered",
                                                   answered_by=user.pk)
        event = ExecutionEvent.objects.create(execution=row, seq=next_event_seq(row.pk), event_type=kind,
                                              payload=payload)
        event_rows_publish(row, [event])
        run_question_answered(execution_id=row.pk, user=user)
    return row


def _not_waiting_for_an_answer(row: Execution) -> Conflict:
    """The refusal of an answer to a run that is not waiting for one: "already answered"
    (with who answered) when its last question was answered and the run went on, else
    the run's status. Caller holds the row lock."""
    last = (ExecutionEvent.objects.filter(execution_id=row.pk, event_type=RunEventType.INTERACTION_RESOLVED)
            .order_by("-seq").values_list("payload", flat=True).first()) or {}
    if last.get("resolution") == "answered" and not row.is_terminal:
        who = get_user_model().objects.filter(pk=last.get("answered_by")).first()
        name = (who.get_full_name() or who.get_username()) if who else "someone else"
        return Conflict(f"This question was already answered by {name}; the run goes on with that answer.",
                        code="already_answered")
    return Conflict(f"Execution is {row.status}; it is not waiting for an answer.", code="invalid_state")


# The run locked, with its last step's number and last event's sequence number, in one
# statement compiled once per process (common.compiled); the numbers cannot move while
# the row is locked (every writer of steps and events holds it).
_LOCKED_WITH_NUMBERS = CompiledQuery(
    lambda execution_id: Execution.objects.select_for_update(of=("self",)).annotate(
        last_step_number=Subquery(ExecutionStep.objects.filter(execution_id=OuterRef("pk"))
                                  .order_by("-step_number").values("step_number")[:1]),
        last_event_seq=Subquery(ExecutionEvent.objects.filter(execution_id=OuterRef("pk"))
                                .order_by("-seq").values("seq")[:1]),
    ).filter(pk=execution_id).order_by()[:1],
    execution_id=-(2**62) + 47,
)


def execution_resume_after_resolution(*, execution_id: int, call_id: str, resolution: dict) -> None:
    """Record an approver's decision as a step and queue the resume. Runs inside the
    caller's transaction, after the audit entry was written."""
    row = _LOCKED_WITH_NUMBERS.first(execution_id=execution_id)
    if row is None:
        raise Execution.DoesNotExist(f"execution {execution_id} is gone")
    if row.status != Execution.Status.AWAITING_APPROVAL:
        raise Conflict(f"Execution is {row.status}; it is not waiting for approval.", code="invalid_state")
    next_number = (row.last_step_number or 0) + 1
    decision = resolution_step(step_number=next_number, turn=row.turn_count, call_id=call_id,
                               tool_name=resolution.get("tool_name"), resolution=resolution)
    steps_append_and_requeue(execution=row, expected_status=Execution.Status.AWAITING_APPROVAL, new_steps=[decision])
    verdict_trace_on_commit(row, approval_id=resolution.get("approval_id"), resolution=resolution["status"],
                            decision=decision.governance_decision.value, resolved_by=resolution.get("resolved_by"))
    seq = (row.last_event_seq or 0) + 1
    kind, payload = approval_resolved_event(
        approval_id=resolution.get("approval_id"), resolution=resolution["status"],
        resolved_by=resolution.get("resolved_by"),
    )
    event = ExecutionEvent.objects.create(execution=row, seq=seq, event_type=kind, payload=payload)
    event_rows_publish(row, [event])


def execution_cancel(*, execution: Execution, user) -> Execution:
    """Cancel a run, then the delegated runs it started that are still going (each in
    its own transaction, after this one committed; docs/delegation.md)."""
    from executions.services.delegation import delegation_children_cancel

    with transaction.atomic():
        row = Execution.objects.select_for_update().get(pk=execution.pk)
        if row.is_terminal:
            raise Conflict(f"Execution already ended ({row.status}).", code="invalid_state")
        run_end_cancelled(row, by=user.get_username())
    delegation_children_cancel(parent_execution_id=row.pk, by=user.get_username())
    return row

"""Delegation: a run hands a task to another agent of its workspace as a child run,
waits for it holding no worker, and goes on with the child's result as the call's
observation (docs/delegation.md).

- ``delegation_start``: the ``delegate_to_agent`` tool's one service. Checks the target
  and the limits, and starts the child with ``execution_start`` (at most one child per
  parent call: a crash and a re-dispatch find the same child).
- ``delegation_resume``: the child ended; its result is appended to the waiting parent,
  which is queued again after commit. Called by the run-end handler (inside the
  child's post-processing) and by the parent's own pause when the child was quicker.
  A compare-and-set on the parent's status and the open call makes it exactly-once.
- ``delegation_children_cancel``: a cancelled parent takes its running children with it.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from agents.models import Agent
from agents.selectors import agent_get_in_workspace
from executions.journal import event_rows_publish, next_event_seq
from executions.models import Execution, ExecutionEvent, ExecutionStep
from executions.runend import RunEnded
from executions.services.finish import run_end_cancelled
from executions.services.queue import steps_append_and_requeue
from executions.services.start import execution_start
from executions.types import DelegationOrigin, RunRequest
from governance.audit import audit_record
from rivercore.contracts import StepStatus, StepType
from rivercore.errors import Conflict, InvalidInput
from rivercore.events import observation_received_event
from rivercore.steps import child_result_step
from rivercore.types.agents import ActionLevel
from rivercore.types.runs import RunStatus
from telemetry import traces

logger = logging.getLogger("river.executions")



def delegation_depth(execution: Execution) -> int:
    """How many delegations separate this run from the run a person or a trigger started."""
    return int(((execution.context or {}).get("delegation") or {}).get("depth", 0))


def delegation_start(*, parent_execution_id: int, call_id: str, agent_reference: str, task: str,
                     payload: dict | None, action_level: str) -> Execution:
    """Start the child run of one ``delegate_to_agent`` call of a running parent.

    ``action_level`` is the parent's own (already capped if the parent is itself a
    child): the child runs at the lower of its own level and this one. The child runs
    as the identity the parent acts as, whose roles are read live at each of its
    segments; the child's requester is the parent's, so the person behind the parent
    run cannot approve what the child does either.
    Raises ``NotFound`` for an agent that is not in the parent's workspace (another
    workspace's agent included), ``InvalidInput`` for a refused delegation (itself, an
    inactive agent, too deep, too many children) and ``Conflict`` when the parent is no
    longer running. Nothing is written then."""
    with transaction.atomic():
        parent = Execution.objects.select_for_update(of=("self",)).select_related("requested_by", "requester").get(
            pk=parent_execution_id)
        if parent.status != Execution.Status.RUNNING:
            raise Conflict(f"This run is {parent.status}; it cannot delegate.", code="invalid_state")
        existing = Execution.objects.filter(parent_execution_id=parent.pk, parent_call_id=call_id).first()
        if existing is not None:
            return existing  # the same call dispatched again after a crash: its child, not a second one
        target = agent_get_in_workspace(workspace_id=parent.workspace_id, reference=agent_reference)
        if target.pk == parent.agent_id:
            raise InvalidInput("An agent cannot delegate to itself.", code="self_delegation",
                               details={"agent": ["is the calling agent"]})
        if target.status != Agent.Status.ACTIVE or target.current_version_id is None:
            raise InvalidInput(f"Agent {target.name!r} is {target.status}; only active agents with a deployed "
                               "version take delegated tasks.", code="agent_not_active",
                               details={"agent": [f"status is {target.status}"]})
        depth = delegation_depth(parent) + 1
        if depth > settings.RIVER_MAX_DELEGATION_DEPTH:
            raise InvalidInput(
                f"Delegation depth limit reached: this run is already {depth - 1} delegation(s) deep and the "
                f"limit is {settings.RIVER_MAX_DELEGATION_DEPTH}. Do the task yourself or report back.",
                code="delegation_depth_exceeded", details={"agent": ["delegation depth limit reached"]})
        started = Execution.objects.filter(parent_execution_id=parent.pk).exclude(parent_call_id="").count()
        if started >= settings.RIVER_MAX_DELEGATIONS_PER_RUN:
            raise InvalidInput(
                f"This run already delegated {started} task(s), the limit per run "
                f"({settings.RIVER_MAX_DELEGATIONS_PER_RUN}).", code="delegation_limit_reached",
                details={"agent": ["too many delegations in this run"]})
        # The parent's span dispatching this call (its turn): the child's trace joins it.
        origin = DelegationOrigin(
            user_id=parent.requested_by_id, requester_id=parent.requester_id, parent_execution_id=parent.pk,
            parent_call_id=call_id, depth=depth, action_level_cap=ActionLevel(action_level),
            parent_traceparent=traces.run_span_traceparent(execution_id=parent.pk) or None,
        )
        child = execution_start(agent=target, request=RunRequest(
            agent_id=target.pk, origin=origin, prompt=task, payload=payload))
        audit_record(
            organization_id=target.workspace.organization_id, workspace_id=parent.workspace_id,
            event_type="delegation_started", execution_id=parent.pk, agent_id=parent.agent_id,
            details={"child_execution_id": child.pk, "child_agent_id": str(target.pk), "call_id": call_id,
                     "depth": depth, "action_level_cap": action_level},
        )
    return child


def delegation_child_ended(ended: RunEnded) -> None:
    """Run-end handler (``executions.runend``): a delegated run ended, so its parent
    goes on. Runs inside the child's post-processing transaction."""
    if ended.parent_execution_id is not None:
        delegation_resume(child_execution_id=ended.execution_id)


def delegation_resume(*, child_execution_id: int) -> bool:
    """Append the ended child's result to its waiting parent and queue the parent again
    after commit. Returns False, writing nothing, when there is nothing to do: the
    child has not ended, is not a delegation, or its parent is no longer waiting on
    it (already resumed, cancelled, or not yet paused: the parent's pause then finds
    the child ended and resumes itself, ``delegation_resume_if_ended``)."""
    child = Execution.objects.select_related("agent").filter(pk=child_execution_id).first()
    if child is None or not child.parent_call_id or child.parent_execution_id is None or not child.is_terminal:
        return False
    with transaction.atomic():
        parent = Execution.objects.select_for_update().defer("context", "context_snapshot").filter(
            pk=child.parent_execution_id).first()
        if parent is None:
            return False
        return _resume_locked(parent=parent, child=child)


def delegation_resume_if_ended(*, parent: Execution, child_execution_id: int | None) -> bool:
    """The parent has just paused on its child (caller holds its row lock): if the child
    already ended, resume the parent now, since the child's run-end handler found the
    parent still running and left it alone."""
    if child_execution_id is None:
        return False
    child = Execution.objects.select_related("agent").filter(pk=child_execution_id,
                                                             parent_execution_id=parent.pk).first()
    if child is None or not child.is_terminal:
        return False
    return _resume_locked(parent=parent, child=child)


def _resume_locked(*, parent: Execution, child: Execution) -> bool:
    """Caller holds the parent's row lock. The compare-and-set: the parent waits on a
    child, the child's call is open (its pending tool_call step, no observation yet)."""
    if parent.status != Execution.Status.AWAITING_CHILD:
        return False
    steps = ExecutionStep.objects.filter(execution_id=parent.pk, call_id=child.parent_call_id)
    call = steps.filter(step_type=StepType.TOOL_CALL, status=StepStatus.PENDING).order_by("-step_number").first()
    if call is None or steps.filter(step_type=StepType.OBSERVATION).exists():
        return False
    last = ExecutionStep.objects.filter(execution_id=parent.pk).order_by("-step_number").values_list(
        "step_number", flat=True).first() or 0
    result = child.result or {}
    observation = child_result_step(
        step_number=last + 1, turn=call.turn, call_id=call.call_id, tool_name=call.tool_name,
        arguments=call.input if isinstance(call.input, dict) else {}, child_execution_id=child.pk,
        agent_id=str(child.agent_id), agent_name=child.agent.name, status=RunStatus(child.status),
        summary=str(result.get("summary") or ""), error=child.error,
        artifacts=list(result.get("output_artifacts") or []),
    )
    steps_append_and_requeue(execution=parent, expected_status=Execution.Status.AWAITING_CHILD, new_steps=[observation])
    # The parent's feed shows what the child returned, as it shows every other tool's
    # result: the same event the engine emits when a call's observation arrives.
    kind, payload = observation_received_event(
        turn=call.turn, tool_name=call.tool_name, result_summary=str(observation.output.get("summary") or ""),
        duration_ms=_child_duration_ms(child), call_id=call.call_id, step_number=observation.step_number,
        status=observation.status.value,
    )
    event = ExecutionEvent.objects.create(execution=parent, seq=next_event_seq(parent.pk), event_type=kind,
                                          payload=payload)
    event_rows_publish(parent, [event])  # after commit, with the parent's status update
    logger.info("execution %s resumed: its delegated run %s ended %s", parent.pk, child.pk, child.status)
    return True


def _child_duration_ms(child: Execution) -> int:
    """How long the delegated call waited: the child's run, from its start to its end."""
    if child.started_at is None or child.finished_at is None:
        return 0
    return max(0, int((child.finished_at - child.started_at).total_seconds() * 1000))


def delegation_children_cancel(*, parent_execution_id: int, by: str) -> list[int]:
    """Cancel the delegated runs of a cancelled parent that have not ended, and theirs in
    turn. Each child is cancelled in its own transaction, after the parent's cancel
    committed (no lock on the parent is held, so a child's post-processing, which
    locks the parent, cannot deadlock with it). Returns the cancelled ids."""
    cancelled: list[int] = []
    pending = [parent_execution_id]
    while pending:
        parent_id = pending.pop()
        children = list(Execution.objects.filter(parent_execution_id=parent_id).exclude(parent_call_id="")
                        .exclude(status__in=Execution.TERMINAL).values_list("pk", flat=True))
        for child_id in children:
            with transaction.atomic():
                row = Execution.objects.select_for_update().defer("context").get(pk=child_id)
                if row.is_terminal:
                    continue
                run_end_cancelled(row, by=f"{by} (parent run {parent_id} cancelled)")
            cancelled.append(child_id)
            pending.append(child_id)
    return cancelled

""""Why did the agent do this?" for one step of a run, from one call.

A bounded number of queries whatever the run's length: the step, its turn's steps, its
neighbours' numbers, the turn's recorded model calls (and the blobs they reference),
and the approval of its tool call."""

from __future__ import annotations

from django.db.models import Max, Min, Q
from django.http import Http404

from executions.modelcalls import model_calls_for_run
from executions.models import Execution, ExecutionStep
from governance.models import ApprovalRequest


def _step_dump(step: ExecutionStep) -> dict:
    return {
        "step_number": step.step_number, "turn": step.turn, "step_type": step.step_type,
        "tool_name": step.tool_name, "tool_category": step.tool_category, "call_id": step.call_id,
        "input": step.input, "output": step.output, "status": step.status,
        "governance_decision": step.governance_decision, "error": step.error, "duration_ms": step.duration_ms,
        "model_used": step.model_used, "model_tier": step.model_tier, "provider": step.provider,
        "tokens": step.tokens,
    }


def _governance(check: ExecutionStep) -> dict:
    output = check.output if isinstance(check.output, dict) else {}
    return {
        "step_number": check.step_number, "decision": check.governance_decision, "reason": output.get("reason", ""),
        "policy": output.get("policy_matched") or output.get("policy"), "policy_id": output.get("policy_id"),
        "enforcement": output.get("enforcement"), "point": output.get("point", "before_tool"),
        "resolution": output.get("resolution"),
    }


def _approval(approval: ApprovalRequest | None) -> dict | None:
    if approval is None:
        return None
    approver = approval.resolved_by
    resolution = approval.resolution or {}
    return {
        "id": str(approval.pk), "status": approval.status, "tool_name": approval.tool_name,
        "proposed_payload": approval.proposed_payload,
        "edits": resolution.get("modified_args") or resolution.get("edits"),
        "comment": approval.resolution_comment,
        "approver": {"id": approver.pk, "username": approver.get_username()} if approver else None,
        "requested_at": approval.created_at, "resolved_at": approval.resolved_at,
    }


def step_why(*, execution: Execution, step_number: int) -> dict:
    """The caller has already scoped ``execution`` to the user's workspaces."""
    step = ExecutionStep.objects.filter(execution=execution, step_number=step_number).first()
    if step is None:
        raise Http404("No such step.")
    turn_steps = list(ExecutionStep.objects.filter(execution=execution, turn=step.turn).order_by("step_number"))
    bounds = ExecutionStep.objects.filter(execution=execution).aggregate(
        previous=Max("step_number", filter=Q(step_number__lt=step_number)),
        next=Min("step_number", filter=Q(step_number__gt=step_number)))
    reasoning = next((s for s in turn_steps if s.step_type == ExecutionStep.StepType.REASONING), None)
    calls = model_calls_for_run(execution_id=execution.pk, turn=step.turn)
    call_id = step.call_id
    related = [s for s in turn_steps if call_id and s.call_id == call_id]
    if not call_id and step.step_type != ExecutionStep.StepType.REASONING:
        related = []
    governance = [_governance(s) for s in related if s.step_type == ExecutionStep.StepType.GOVERNANCE_CHECK]
    tool_call = next((s for s in related if s.step_type == ExecutionStep.StepType.TOOL_CALL), None)
    observation = next((s for s in related if s.step_type == ExecutionStep.StepType.OBSERVATION), None)
    approval = None
    if call_id:
        approval = (ApprovalRequest.objects.select_related("resolved_by")
                    .filter(execution_id=execution.pk, tool_call_id=call_id).order_by("-created_at").first())
    return {
        "execution_id": execution.pk,
        "step": _step_dump(step),
        "place": {"turn": step.turn, "turns_in_run": execution.turn_count,
                  "previous_step": bounds["previous"], "next_step": bounds["next"],
                  "steps_in_turn": [s.step_number for s in turn_steps]},
        "reasoning_step": reasoning.step_number if reasoning else None,
        "model_call": calls[-1] if calls else None,
        "model_calls_in_turn": len(calls),
        "governance": governance,
        "approval": _approval(approval),
        "tool": {
            "name": step.tool_name or (tool_call.tool_name if tool_call else ""),
            "input": tool_call.input if tool_call else (step.input if step.tool_name else None),
            "result": observation.output if observation else None,
            "status": observation.status if observation else None,
            "error": observation.error if observation else "",
        } if (tool_call or observation or step.tool_name) else None,
    }

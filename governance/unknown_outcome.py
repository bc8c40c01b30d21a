"""A person says whether an MCP write whose outcome is unknown happened (issue 31 §1).

The run paused on an approval request of kind ``unknown_outcome``
(rivercore.unknown_outcome): River sent the call, the worker died before its result
was recorded, and River will not send it again on its own. The answer goes through
the same rules as an approval (the request's approver roles or an organization admin,
never the run's requester unless the workspace allows self-approval, never a trigger's
service identity), is decided exactly once under the run's lock, is audited
(``unknown_outcome_confirmed`` with the choice and the person) and resumes the run:

- ``done``: the call's observation records that a person confirmed it happened;
- ``not_done``: the call is sent again, once, through the gate.

An unanswered request expires like an approval and the run ends ``approval_expired``
with the error ``OUTCOME_UNKNOWN`` (executions.services.finish): never a success.
"""

from __future__ import annotations

from django.db import connection, transaction
from django.utils import timezone

from common.dberrors import Backoff, error_is_transient, retry_transient
from governance.approvals import approval_authorize, approval_get_for_user
from governance.audit import audit_record
from governance.models import ApprovalRequest
from governance.notifications import approval_notifications_resolve
from governance.runs import run_control
from rivercore import unknown_outcome
from rivercore.errors import Conflict, InvalidInput
from rivercore.types.governance import DecisionChannel

NOT_THIS_KIND = "This request asks whether a call happened; answer it with done or not_done (confirm-outcome)."
ONLY_THIS_KIND = "This request is an ordinary approval; approve or reject it instead."


def unknown_outcome_confirm(
    *, user, approval_id, outcome: str, comment: str = "", channel: str = DecisionChannel.API
) -> ApprovalRequest:
    """Record a person's answer to an unknown-outcome request and resume its run."""
    if outcome not in unknown_outcome.CHOICES:
        raise InvalidInput("outcome must be done or not_done.", details={"outcome": ["must be done or not_done"]})
    approval = approval_get_for_user(user=user, approval_id=approval_id)  # 404 outside the user's workspaces
    if approval.kind != ApprovalRequest.Kind.UNKNOWN_OUTCOME:
        raise Conflict(ONLY_THIS_KIND, code="not_unknown_outcome")
    approval_authorize(user=user, approval=approval)  # 403 before anything is locked
    control = run_control()

    def decide_and_resume() -> ApprovalRequest:
        with transaction.atomic():
            control.lock(approval.execution_id)  # run first, then its request (as resolving does)
            locked = (
                ApprovalRequest.objects.select_for_update(of=("self",)).select_related("workspace").get(pk=approval.pk)
            )
            approval_authorize(user=user, approval=locked)
            if locked.status != ApprovalRequest.Status.PENDING:
                raise Conflict(f"This request is already {locked.status}.", code="already_resolved")
            if locked.expires_at <= timezone.now():
                raise Conflict("This request has expired.", code="expired")
            locked.status = ApprovalRequest.Status.APPROVED
            locked.resolved_by = user
            locked.resolved_at = timezone.now()
            locked.resolution_comment = comment or ""
            locked.resolution = unknown_outcome.resolution(outcome=outcome, resolved_by=str(user.pk), comment=comment)
            locked.save(update_fields=["status", "resolved_by", "resolved_at", "resolution_comment", "resolution"])
            approval_notifications_resolve(approval=locked)
            audit_record(
                organization_id=locked.workspace.organization_id,
                workspace_id=locked.workspace_id,
                event_type="unknown_outcome_confirmed",
                actor=user,
                execution_id=locked.execution_id,
                agent_id=locked.agent_id,
                approval_id=locked.pk,
                details={
                    "tool_name": locked.tool_name,
                    "call_id": locked.tool_call_id,
                    "outcome": outcome,
                    "confirmed_by": user.get_username(),
                    "comment": comment or "",
                    "channel": str(channel),
                },
            )
            control.resume_after_resolution(
                locked.execution_id,
                call_id=locked.tool_call_id,
                resolution={**locked.resolution, "approval_id": str(locked.pk), "tool_name": locked.tool_name},
            )
        return locked

    attempts = 1 if connection.in_atomic_block else 5
    return retry_transient(
        decide_and_resume,
        backoff=Backoff(attempts=attempts, base_seconds=0.02, cap_seconds=0.5),
        is_transient=error_is_transient,
    )


def approval_kind_check(approval: ApprovalRequest) -> None:
    """Approve, reject and edit do not answer an unknown-outcome request (409)."""
    if approval.kind == ApprovalRequest.Kind.UNKNOWN_OUTCOME:
        raise Conflict(NOT_THIS_KIND, code="unknown_outcome")

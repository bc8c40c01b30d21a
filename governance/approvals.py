"""Approval requests: opened when a run pauses, resolved exactly once, or expired.

The audit entry is written in the same transaction as the decision and before the
run's resume is queued (the resume is queued on commit by the caller).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from common.errors import Conflict, NotFound, PermissionDenied
from governance.audit import audit_record
from governance.models import ApprovalRequest
from tenancy.models import Workspace
from tenancy.permissions import APPROVAL_RESOLVE, ORG_ADMIN_ROLE
from tenancy.selectors import workspace_permissions, workspace_roles, workspaces_for_user


def approval_request_open(
    *,
    workspace_id: int,
    execution_id: int,
    agent_id,
    call_id: str,
    payload: dict,
    approver_roles: list[str],
    escalation_timeout_minutes: int,
) -> ApprovalRequest:
    """Idempotent per (execution, call): a re-run segment finds the same request."""
    existing = ApprovalRequest.objects.filter(execution_id=execution_id, tool_call_id=call_id).first()
    if existing is not None:
        return existing
    workspace = Workspace.objects.get(pk=workspace_id)
    approval = ApprovalRequest.objects.create(
        workspace_id=workspace_id,
        execution_id=execution_id,
        agent_id=agent_id,
        tool_name=payload["tool_name"],
        tool_call_id=call_id,
        proposed_payload=payload.get("proposed_payload") or {},
        reasoning_summary=payload.get("reasoning_summary") or "",
        risk_context=payload.get("risk_context") or "",
        confidence_score=payload.get("confidence_score"),
        auto_approve_eligible=bool(payload.get("auto_approve_eligible")),
        approver_roles=list(approver_roles),
        expires_at=timezone.now() + timedelta(minutes=escalation_timeout_minutes),
    )
    audit_record(
        organization_id=workspace.organization_id, workspace_id=workspace_id, event_type="approval_requested",
        execution_id=execution_id, agent_id=agent_id, approval_id=approval.pk,
        details={"tool_name": approval.tool_name, "proposed_payload": approval.proposed_payload,
                 "expires_at": approval.expires_at.isoformat()},
    )
    transaction.on_commit(lambda: _notify(approval.pk))
    return approval


def _notify(approval_id) -> None:
    from governance.tasks import notify_approval

    notify_approval.delay(str(approval_id))


def may_resolve(*, user, approval: ApprovalRequest) -> bool:
    workspace = approval.workspace
    roles = set(workspace_roles(user=user, workspace=workspace))
    if APPROVAL_RESOLVE not in workspace_permissions(user=user, workspace=workspace):
        return False
    return ORG_ADMIN_ROLE in roles or bool(roles & set(approval.approver_roles or []))


def approvals_for_user(*, user, status: str | None = None, resolvable_only: bool = False) -> QuerySet:
    qs = ApprovalRequest.objects.filter(workspace__in=workspaces_for_user(user=user)).select_related("workspace")
    if status:
        qs = qs.filter(status=status)
    if resolvable_only:
        allowed = [a.pk for a in qs if may_resolve(user=user, approval=a)]
        qs = qs.filter(pk__in=allowed)
    return qs.order_by("-created_at")


def approval_get_for_user(*, user, approval_id) -> ApprovalRequest:
    """The request if it is in one of the user's workspaces; otherwise 404."""
    try:
        key = uuid.UUID(str(approval_id))
    except ValueError:
        raise NotFound("Approval request not found.") from None
    approval = approvals_for_user(user=user).filter(pk=key).first()
    if approval is None:
        raise NotFound("Approval request not found.")
    return approval


_STATUS_FOR = {
    "approved": ApprovalRequest.Status.APPROVED,
    "rejected": ApprovalRequest.Status.REJECTED,
    "edited_approved": ApprovalRequest.Status.EDITED,
}


def approval_decide(
    *, approval_id, user, status: str, modified_args: dict | None = None, comment: str = ""
) -> ApprovalRequest:
    """Record one decision. Caller runs this inside a transaction and queues the
    resume after it; a second decision on the same request gets 409."""
    approval = ApprovalRequest.objects.select_for_update().select_related("workspace").get(pk=approval_id)
    if not may_resolve(user=user, approval=approval):
        raise PermissionDenied("Your role may not resolve this approval request.")
    if approval.status != ApprovalRequest.Status.PENDING:
        raise Conflict(f"This approval request is already {approval.status}.", code="already_resolved")
    if approval.expires_at <= timezone.now():
        raise Conflict("This approval request has expired.", code="expired")
    approval.status = _STATUS_FOR[status]
    approval.resolved_by = user
    approval.resolved_at = timezone.now()
    approval.resolution_comment = comment or ""
    approval.resolution = {"status": status, "modified_args": modified_args, "resolved_by": str(user.pk),
                           "resolution_comment": comment or None}
    approval.save(update_fields=["status", "resolved_by", "resolved_at", "resolution_comment", "resolution"])
    details = {"tool_name": approval.tool_name, "resolution": status, "comment": comment or ""}
    if status == "edited_approved":
        details["diff"] = args_diff(approval.proposed_payload, modified_args or {})
    audit_record(
        organization_id=approval.workspace.organization_id, workspace_id=approval.workspace_id,
        event_type=f"approval_{approval.status}", actor=user, execution_id=approval.execution_id,
        agent_id=approval.agent_id, approval_id=approval.pk, details=details,
    )
    return approval


def args_diff(before: dict, after: dict) -> dict:
    changed = {}
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            changed[key] = {"from": before.get(key), "to": after.get(key)}
    return changed


def approvals_close_for_execution(*, execution_id: int, reason: str) -> int:
    """A cancelled run's pending requests expire with it (audited)."""
    closed = 0
    for approval in ApprovalRequest.objects.select_for_update().select_related("workspace").filter(
        execution_id=execution_id, status=ApprovalRequest.Status.PENDING
    ):
        approval.status = ApprovalRequest.Status.EXPIRED
        approval.resolution_comment = reason
        approval.resolved_at = timezone.now()
        approval.save(update_fields=["status", "resolution_comment", "resolved_at"])
        audit_record(
            organization_id=approval.workspace.organization_id, workspace_id=approval.workspace_id,
            event_type="approval_expired", execution_id=execution_id, agent_id=approval.agent_id,
            approval_id=approval.pk, details={"reason": reason},
        )
        closed += 1
    return closed


def approval_expire(*, approval_id) -> ApprovalRequest | None:
    """Move one overdue pending request to expired (caller holds a transaction)."""
    approval = (
        ApprovalRequest.objects.select_for_update(skip_locked=True).select_related("workspace")
        .filter(pk=approval_id, status=ApprovalRequest.Status.PENDING, expires_at__lte=timezone.now()).first()
    )
    if approval is None:
        return None
    approval.status = ApprovalRequest.Status.EXPIRED
    approval.resolved_at = timezone.now()
    approval.save(update_fields=["status", "resolved_at"])
    audit_record(
        organization_id=approval.workspace.organization_id, workspace_id=approval.workspace_id,
        event_type="approval_expired", execution_id=approval.execution_id, agent_id=approval.agent_id,
        approval_id=approval.pk, details={"reason": "expired", "expires_at": approval.expires_at.isoformat()},
    )
    return approval


def approvals_overdue() -> list:
    return list(
        ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING, expires_at__lte=timezone.now())
        .values_list("pk", flat=True)[:500]
    )


def approvals_needing_reminder(*, before_minutes: int) -> list:
    soon = timezone.now() + timedelta(minutes=before_minutes)
    return list(
        ApprovalRequest.objects.filter(
            status=ApprovalRequest.Status.PENDING, reminder_sent_at__isnull=True, expires_at__lte=soon,
            expires_at__gt=timezone.now(),
        ).values_list("pk", flat=True)[:500]
    )

"""Escalation chains: an undecided request moves to the next group before it expires.

The agent version's ``approval_rules.escalation`` (``[{after_minutes, approver_roles}]``,
checked when the version is saved: later than the step before, earlier than the
expiry) is copied onto the request when it opens. The periodic sweep
(``governance.expire_approvals``) calls ``approvals_escalate_due``: a pending request
past its ``next_escalation_at`` moves to the step's roles (they replace the request's
``approver_roles``; organization admins can always decide, and approvals already given
under a quorum still count), is audited as ``approval_escalated``, and the new group is
notified after commit through the usual approval notifications. The people who may no
longer decide see their notification resolved ("Escalated to admin, …").

Each move is claimed under the request's row lock (``skip_locked``: a request being
decided right now is looked at again next sweep), so two overlapping sweeps move a
request once per step.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from governance.audit import audit_record
from governance.models import ApprovalRequest, Notification
from governance.notifications import (
    APPROVAL_ESCALATED,
    APPROVAL_REMINDER,
    APPROVAL_REQUESTED,
    approval_deciders,
    approval_notify,
    local_time,
)
from rivercore.types.agents import ApprovalRules

SWEEP_BATCH = 500


def escalation_fields(*, rules: ApprovalRules | None, opened_at) -> dict:
    """The escalation fields of a request opening at ``opened_at``."""
    chain = [step.model_dump(mode="json") for step in (rules.escalation if rules is not None else [])]
    first = opened_at + timedelta(minutes=chain[0]["after_minutes"]) if chain else None
    return {"escalation_chain": chain, "next_escalation_at": first}


def approvals_escalation_due(*, now=None) -> list:
    now = now or timezone.now()
    return list(
        ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING, next_escalation_at__lte=now,
                                       expires_at__gt=now)
        .order_by("next_escalation_at").values_list("pk", flat=True)[:SWEEP_BATCH]
    )


def approval_escalate(*, approval_id) -> ApprovalRequest | None:
    """Move one due request to its next escalation step. Caller holds a transaction."""
    now = timezone.now()
    approval = (
        ApprovalRequest.objects.select_for_update(skip_locked=True, of=("self",)).select_related("workspace")
        .filter(pk=approval_id, status=ApprovalRequest.Status.PENDING, next_escalation_at__lte=now,
                expires_at__gt=now).first()
    )
    if approval is None:
        return None
    chain = list(approval.escalation_chain or [])
    if approval.escalation_level >= len(chain):  # nothing left to move to
        approval.next_escalation_at = None
        approval.save(update_fields=["next_escalation_at"])
        return None
    step = chain[approval.escalation_level]
    from_roles = list(approval.approver_roles or [])
    approval.approver_roles = list(step["approver_roles"])
    approval.escalation_level += 1
    approval.escalated_at = now
    following = chain[approval.escalation_level] if approval.escalation_level < len(chain) else None
    approval.next_escalation_at = (approval.created_at + timedelta(minutes=following["after_minutes"])
                                   if following else None)
    approval.save(update_fields=["approver_roles", "escalation_level", "escalated_at", "next_escalation_at"])
    audit_record(
        organization_id=approval.workspace.organization_id, workspace_id=approval.workspace_id,
        event_type="approval_escalated", execution_id=approval.execution_id, agent_id=approval.agent_id,
        approval_id=approval.pk,
        details={"tool_name": approval.tool_name, "level": approval.escalation_level, "from_roles": from_roles,
                 "to_roles": approval.approver_roles, "after_minutes": step["after_minutes"],
                 "expires_at": approval.expires_at.isoformat()},
    )
    _hand_over(approval)
    return approval


def _hand_over(approval: ApprovalRequest) -> None:
    """Resolve the notifications of the people who may no longer decide; notify the new group."""
    still = [user.pk for user in approval_deciders(approval=approval)]
    roles = ", ".join(approval.approver_roles)
    text = f"Escalated to {roles}, {local_time(approval.escalated_at, workspace=approval.workspace)}"[:200]
    Notification.objects.filter(
        approval_id=approval.pk, resolved_at__isnull=True, kind__in=[APPROVAL_REQUESTED, APPROVAL_REMINDER,
                                                                     APPROVAL_ESCALATED],
    ).exclude(user_id__in=still).update(resolved_at=timezone.now(), resolution=text)
    approval_notify(approval_id=approval.pk)


def approvals_escalate_due() -> int:
    """Periodic: move every due request one step along its chain. Returns how many moved."""
    moved = 0
    for approval_id in approvals_escalation_due():
        with transaction.atomic():
            if approval_escalate(approval_id=approval_id) is not None:
                moved += 1
    return moved

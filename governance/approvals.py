"""Approval requests: opened when a run pauses, resolved exactly once, or expired.

The audit entry is written in the same transaction as the decision and before the
run's resume is queued (the resume is queued on commit by the caller).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from common.compiled import CompiledQuery
from governance.audit import audit_record
from governance.models import ApprovalRequest
from governance.notifications import approval_notifications_resolve, approval_notify
from governance.quorum import (
    approval_quorum_fields,
    quorum_not_yet_approved_by,
    quorum_outcome_details,
    quorum_round_check,
    quorum_vote,
)
from governance.slack_updates import slack_messages_update_on_commit
from rivercore.errors import Conflict, NotFound, PermissionDenied
from rivercore.types.agents import ApprovalRules
from rivercore.types.governance import DecisionChannel, ResolutionStatus
from tenancy.models import Workspace
from tenancy.permissions import APPROVAL_RESOLVE, ORG_ADMIN_ROLE
from tenancy.selectors import (
    role_annotations,
    roles_annotated,
    roles_permissions,
    workspaces_for_user,
    workspaces_of_user_id,
)

logger = logging.getLogger(__name__)


def approval_request_open(
    *,
    workspace_id: int,
    execution_id: int,
    agent_id,
    call_id: str,
    payload: dict,
    approver_roles: list[str],
    escalation_timeout_minutes: int,
    run_started_by_id: int | None = None,
    approval_rules: ApprovalRules | None = None,
) -> ApprovalRequest:
    """Idempotent per (execution, call): a re-run segment finds the same request.

    ``run_started_by_id`` is the run's requester, the person answerable for it whatever
    started it (the clicker, a key's owner, a trigger's responsible person, the parent
    or upstream run's requester, a session's owner), never the identity it acts as;
    segregation of duties keeps them from resolving it (see ``approval_authorize``).
    ``approval_rules`` (the agent version's) set the quorum and the escalation chain
    (governance.quorum, governance.escalation)."""
    kind = payload.get("kind") or ApprovalRequest.Kind.APPROVAL
    existing = ApprovalRequest.objects.filter(execution_id=execution_id, tool_call_id=call_id, kind=kind).first()
    reopens = payload.get("reopens")  # paused again at write time: a new request (governance.reopen)
    # An unknown outcome asked again (a retry that was interrupted too) is a new question.
    fresh = reopens or kind == ApprovalRequest.Kind.UNKNOWN_OUTCOME
    if existing is not None and not (fresh and existing.status != ApprovalRequest.Status.PENDING):
        return existing
    if reopens:
        from governance.reopen import reopened_preview

        payload = {**payload, "preview": reopened_preview(execution_id=execution_id, payload=payload)}
    workspace = Workspace.objects.get(pk=workspace_id)
    now = timezone.now()
    approval = ApprovalRequest.objects.create(
        **approval_quorum_fields(rules=approval_rules, payload=payload, now=now),
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
        run_started_by_id=run_started_by_id,
        created_at=now,
        expires_at=now + timedelta(minutes=escalation_timeout_minutes),
        preview=payload.get("preview") or {},  # issue 29 §1: the call's effect (governance.previews)
        kind=kind,
    )
    audit_record(
        organization_id=workspace.organization_id, workspace_id=workspace_id, event_type="approval_requested",
        execution_id=execution_id, agent_id=agent_id, approval_id=approval.pk,
        details={"tool_name": approval.tool_name, "proposed_payload": approval.proposed_payload,
                 **({"kind": kind} if kind != ApprovalRequest.Kind.APPROVAL else {}),
                 "expires_at": approval.expires_at.isoformat(),
                 **({"required_approvals": approval.required_approvals} if approval.required_approvals > 1 else {}),
                 **({"escalation": approval.escalation_chain} if approval.escalation_chain else {})},
    )
    if reopens:
        from governance.reopen import reopen_audit

        reopen_audit(approval=approval, organization_id=workspace.organization_id, payload=payload)
    approval_notify(approval_id=approval.pk)
    return approval


# The caller's standing in a workspace, read in one statement compiled once per process
# (common.compiled): their roles as ``workspace_roles`` gives them (a trigger's service
# identity capped by its responsible person) and whether they are such an identity.
_STANDING = CompiledQuery(
    lambda user_id, workspace_id: Workspace.objects.annotate(**role_annotations(
        user_id=user_id, workspace_ref="pk", organization_ref="organization_id"))
    .only("pk").filter(pk=workspace_id).order_by()[:1],
    user_id=-(2**62) + 31, workspace_id=-(2**62) + 37,
)


def _standing(*, user, workspace) -> tuple[list[str], bool]:
    """(the user's roles in the workspace, whether the user is a trigger's service identity)."""
    if not getattr(user, "pk", None):
        return [], False
    row = _STANDING.first(user_id=user.pk, workspace_id=workspace.pk)
    if row is None:
        return [], False
    return roles_annotated(row), bool(row.run_as_principal)


def resolver_roles(*, user, workspace) -> set[str]:
    """The user's roles in the workspace if they hold ``approval:resolve`` there, else none."""
    roles, principal = _standing(user=user, workspace=workspace)  # read once: the permission follows
    if principal or APPROVAL_RESOLVE not in roles_permissions(roles):
        return set()
    return set(roles)


def roles_allow(roles: set[str], approval: ApprovalRequest) -> bool:
    return ORG_ADMIN_ROLE in roles or bool(roles & set(approval.approver_roles or []))


SERVICE_PRINCIPAL_MESSAGE = "A trigger's service identity can never resolve an approval request."

SELF_APPROVAL_MESSAGE = (
    "You are this run's requester (you started this run, or it was started by your key, your trigger, "
    "your conversation or a run you requested), so someone else must resolve its approvals "
    "(segregation of duties). A workspace admin can allow self-approval in the workspace settings."
)


def self_approval_refused(*, user, approval: ApprovalRequest) -> bool:
    """Whether ``user`` is the requester of the run behind ``approval`` in a workspace
    that does not allow self-approval. The requester is a person, whatever path started
    the run (a token, a trigger's key, schedule or webhook, a delegation, a pipeline, a
    hand-off), so no second token, trigger or agent gets around it."""
    return (
        approval.run_started_by_id is not None
        and approval.run_started_by_id == getattr(user, "pk", None)
        and not approval.workspace.allow_self_approval
    )


def _with_standing(queryset: QuerySet, *, user_id) -> QuerySet:
    """``queryset``'s requests, each carrying the standing of the user ``user_id`` in its
    workspace (the annotations of ``role_annotations``), so authorizing needs no
    statement of its own. Whoever runs it marks the rows with ``_read_for``."""
    return queryset.annotate(**role_annotations(
        user_id=user_id, workspace_ref="workspace_id", organization_ref="workspace__organization_id"))


def _read_for(approval: ApprovalRequest | None, user_id: int) -> ApprovalRequest | None:
    """Mark a row read by ``_with_standing`` with the user whose standing it carries."""
    if approval is not None:
        approval.standing_user_id = user_id
    return approval


# The two reads of a request a resolution makes, each one statement compiled once per
# process (common.compiled): in one of the user's workspaces, before the lock; and
# locked (its row only, so resolutions of other requests in the workspace do not queue
# behind it), for the decision. Both carry the run's requester and the user's standing.
_USER_STAND_IN, _APPROVAL_STAND_IN = -(2**62) + 41, uuid.UUID("00000000-0000-4000-8000-00000000f00d")
_FOR_USER = CompiledQuery(
    lambda user_id, approval_id: _with_standing(
        ApprovalRequest.objects.filter(pk=approval_id, workspace__in=workspaces_of_user_id(user_id=user_id))
        .select_related("workspace", "run_started_by"), user_id=user_id).order_by()[:1],
    user_id=_USER_STAND_IN, approval_id=_APPROVAL_STAND_IN,
)
_LOCKED = CompiledQuery(
    lambda user_id, approval_id: _with_standing(
        ApprovalRequest.objects.select_for_update(of=("self",)).select_related("workspace", "run_started_by")
        .filter(pk=approval_id), user_id=user_id).order_by()[:1],
    user_id=_USER_STAND_IN, approval_id=_APPROVAL_STAND_IN,
)


def _standing_of(*, user, approval: ApprovalRequest) -> tuple[list[str], bool]:
    """The standing ``approval`` was read with (``_with_standing``) when it was
    read for this user, else read now (one statement)."""
    if getattr(user, "pk", None) is not None and getattr(approval, "standing_user_id", None) == user.pk:
        return roles_annotated(approval), bool(approval.run_as_principal)
    return _standing(user=user, workspace=approval.workspace)


def approval_authorize(*, user, approval: ApprovalRequest) -> None:
    """Raise PermissionDenied unless ``user`` may resolve ``approval``: approve,
    reject or edit. Every way in (API, pages, services) comes through here."""
    roles, principal = _standing_of(user=user, approval=approval)
    if principal:
        raise PermissionDenied(SERVICE_PRINCIPAL_MESSAGE, code="service_principal_cannot_approve")
    if APPROVAL_RESOLVE not in roles_permissions(roles) or not roles_allow(set(roles), approval):
        raise PermissionDenied("Your role may not resolve this approval request.")
    if self_approval_refused(user=user, approval=approval):
        raise PermissionDenied(SELF_APPROVAL_MESSAGE, code="self_approval_forbidden")


def may_resolve(*, user, approval: ApprovalRequest) -> bool:
    """Workspace members holding approval:resolve whose role is one of the request's
    approver roles, and organization admins; never the person who started the run
    unless the workspace allows self-approval."""
    try:
        approval_authorize(user=user, approval=approval)
    except PermissionDenied:
        return False
    return True


def approval_resolver(*, user, workspace):
    """``may_resolve`` for many requests of one workspace, the user's roles read once:
    a page of cards costs the same queries as one card."""
    roles = resolver_roles(user=user, workspace=workspace)

    def allowed(approval: ApprovalRequest) -> bool:
        return roles_allow(roles, approval) and not self_approval_refused(user=user, approval=approval)

    return allowed


def approvals_for_user(*, user, status: str | None = None, resolvable_only: bool = False) -> QuerySet:
    qs = ApprovalRequest.objects.filter(workspace__in=workspaces_for_user(user=user)).select_related(
        "workspace", "run_started_by")
    if status:
        qs = qs.filter(status=status)
    if resolvable_only:
        roles_by_workspace: dict[int, set[str]] = {}
        allowed = []
        for approval in qs:
            if approval.workspace_id not in roles_by_workspace:
                roles_by_workspace[approval.workspace_id] = resolver_roles(user=user, workspace=approval.workspace)
            if roles_allow(roles_by_workspace[approval.workspace_id], approval) and not self_approval_refused(
                user=user, approval=approval
            ):
                allowed.append(approval.pk)
        qs = qs.filter(pk__in=allowed)
    return qs.order_by("-created_at")


def approvals_pending_count(*, user, workspace: Workspace) -> int:
    """The workspace's pending requests ``user`` may decide, for the frame's badge: the
    inbox's rule (``approval_resolver``: the permission, one of the request's approver
    roles or an organization admin, and never a run they requested unless the
    workspace allows self-approval), so the badge never counts what they cannot decide."""
    roles = resolver_roles(user=user, workspace=workspace)
    if not roles:
        return 0
    pending = ApprovalRequest.objects.filter(workspace=workspace, status=ApprovalRequest.Status.PENDING)
    if not workspace.allow_self_approval and getattr(user, "pk", None) is not None:
        pending = pending.exclude(run_started_by_id=user.pk)
    pending = quorum_not_yet_approved_by(pending, user=user)  # a vote given waits on others, not on them
    if ORG_ADMIN_ROLE in roles:
        return pending.count()
    return sum(1 for approver_roles in pending.values_list("approver_roles", flat=True)
               if roles & set(approver_roles or []))


def approval_get_for_user(*, user, approval_id) -> ApprovalRequest:
    """The request if it is in one of the user's workspaces; otherwise 404."""
    try:
        key = uuid.UUID(str(approval_id))
    except ValueError:
        raise NotFound("Approval request not found.") from None
    if getattr(user, "is_authenticated", False) and user.pk is not None:
        approval = _read_for(_FOR_USER.first(user_id=user.pk, approval_id=key), user.pk)
    else:
        approval = approvals_for_user(user=user).filter(pk=key).first()
    if approval is None:
        raise NotFound("Approval request not found.")
    return approval


_STATUS_FOR = {
    ResolutionStatus.APPROVED: ApprovalRequest.Status.APPROVED,
    ResolutionStatus.REJECTED: ApprovalRequest.Status.REJECTED,
    ResolutionStatus.EDITED_APPROVED: ApprovalRequest.Status.EDITED,
}


def approval_decide(
    *, approval_id, user, status: str, modified_args: dict | None = None, comment: str = "",
    channel: str = DecisionChannel.API,
    arguments_round: int | None = None,
    preview_fingerprint: str | None = None,
) -> ApprovalRequest:
    """Record one decision. Caller runs this inside a transaction and queues the
    resume after it; a second decision on the same request gets 409.

    The request is locked (its row only) and read with the decider's standing and the
    run's requester in the same statement (``_LOCKED``). Under a quorum the decision is
    a vote and the request may stay pending (``governance.quorum``); the caller resumes
    the run only once it is decided."""
    approval = _read_for(_LOCKED.first(user_id=user.pk, approval_id=uuid.UUID(str(approval_id))), user.pk)
    if approval is None:
        raise NotFound("Approval request not found.")
    approval_authorize(user=user, approval=approval)
    if approval.status != ApprovalRequest.Status.PENDING:
        raise Conflict(f"This approval request is already {approval.status}.", code="already_resolved")
    if approval.expires_at <= timezone.now():
        raise Conflict("This approval request has expired.", code="expired")
    # Quorum (issue 29 §3): a vote; None while more approvals are needed.
    quorum_round_check(approval=approval, arguments_round=arguments_round)
    decision = quorum_vote(approval=approval, user=user, status=status, modified_args=modified_args, comment=comment,
                           fingerprint=preview_fingerprint)
    if decision is None:
        return approval
    status, modified_args = decision
    approval.status = _STATUS_FOR[status]
    approval.resolved_by = user
    approval.resolved_at = timezone.now()
    approval.resolution_comment = comment or ""
    approval.resolution = {"status": status, "modified_args": modified_args, "resolved_by": str(user.pk),
                           "resolution_comment": comment or None}
    approval.save(update_fields=["status", "resolved_by", "resolved_at", "resolution_comment", "resolution"])
    _decision_timed(approval)
    approval_notifications_resolve(approval=approval)
    details = {"tool_name": approval.tool_name, "resolution": status, "comment": comment or ""}
    details["channel"] = str(channel)  # issue 29 §4: where the decision was made
    if status == ResolutionStatus.EDITED_APPROVED:
        details["diff"] = args_diff(approval.proposed_payload, modified_args or {})
    details.update(quorum_outcome_details(approval))
    audit_record(
        organization_id=approval.workspace.organization_id, workspace_id=approval.workspace_id,
        event_type=f"approval_{approval.status}", actor=user, execution_id=approval.execution_id,
        agent_id=approval.agent_id, approval_id=approval.pk, details=details,
    )
    return approval


def _decision_timed(approval: ApprovalRequest) -> None:
    """Time to decision (request → resolution or expiry), counted once the resolution commits."""
    from django.db import transaction

    from telemetry.metrics import approval_decided_record

    seconds = (approval.resolved_at - approval.created_at).total_seconds()
    outcome = str(approval.status)
    transaction.on_commit(lambda: approval_decided_record(outcome=outcome, seconds=seconds))


def args_diff(before: dict, after: dict) -> dict:
    changed = {}
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            changed[key] = {"from": before.get(key), "to": after.get(key)}
    return changed


def approvals_close_for_execution(*, execution_id: int, reason: str, cancelled_by: str = "") -> int:
    """A cancelled run's pending requests expire with it (audited); their notifications
    resolve, naming who cancelled."""
    closed = 0
    for approval in ApprovalRequest.objects.select_for_update().select_related("workspace").filter(
        execution_id=execution_id, status=ApprovalRequest.Status.PENDING
    ):
        approval.status = ApprovalRequest.Status.EXPIRED
        approval.resolution_comment = reason
        approval.resolved_at = timezone.now()
        approval.save(update_fields=["status", "resolution_comment", "resolved_at"])
        _decision_timed(approval)
        approval_notifications_resolve(approval=approval, cancelled_by=cancelled_by or "someone")
        audit_record(
            organization_id=approval.workspace.organization_id, workspace_id=approval.workspace_id,
            event_type="approval_expired", execution_id=execution_id, agent_id=approval.agent_id,
            approval_id=approval.pk, details={"reason": reason},
        )
        slack_messages_update_on_commit(approval=approval)
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
    _decision_timed(approval)
    approval_notifications_resolve(approval=approval)
    audit_record(
        organization_id=approval.workspace.organization_id, workspace_id=approval.workspace_id,
        event_type="approval_expired", execution_id=approval.execution_id, agent_id=approval.agent_id,
        approval_id=approval.pk, details={"reason": "expired", "expires_at": approval.expires_at.isoformat()},
    )
    slack_messages_update_on_commit(approval=approval)
    return approval


def approvals_overdue() -> list:
    return list(
        ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING, expires_at__lte=timezone.now())
        .values_list("pk", flat=True)[:500]
    )


def approvals_needing_reminder(*, before_minutes: int) -> list:
    """Pending requests within ``before_minutes`` of expiry and past half their life.

    The second condition keeps a short-lived request (timeout shorter than twice the
    window) from being "reminded" right after its first notification."""
    now = timezone.now()
    soon = now + timedelta(minutes=before_minutes)
    rows = ApprovalRequest.objects.filter(
        status=ApprovalRequest.Status.PENDING, reminder_sent_at__isnull=True, expires_at__lte=soon,
        expires_at__gt=now,
    ).values_list("pk", "created_at", "expires_at")[:500]
    return [pk for pk, created, expires in rows if expires - now <= (expires - created) / 2]


def approval_remind(*, approval_id) -> bool:
    """Claim the single reminder of a pending request and notify its approvers after
    commit. Compare-and-set, so two overlapping sweeps send it once."""
    claimed = ApprovalRequest.objects.filter(
        pk=approval_id, status=ApprovalRequest.Status.PENDING, reminder_sent_at__isnull=True
    ).update(reminder_sent_at=timezone.now())
    if claimed != 1:
        return False
    approval_notify(approval_id=approval_id, reminder=True)
    return True


def approvals_remind_due(*, before_minutes: int) -> int:
    return sum(1 for pk in approvals_needing_reminder(before_minutes=before_minutes) if approval_remind(approval_id=pk))


def approval_action_failed(*, execution_id: int, call_id: str, error: dict) -> ApprovalRequest | None:
    """An approved call was dispatched and failed: audit it and tell the approver.
    Returns the request, or None when the call had no human approval."""
    from governance.notifications import approved_action_failed_notify

    approval = (
        ApprovalRequest.objects.select_related("workspace", "resolved_by")
        .filter(execution_id=execution_id, tool_call_id=call_id, resolved_by__isnull=False).first()
    )
    if approval is None:
        return None
    message = str(error.get("message") or "the call failed")
    audit_record(
        organization_id=approval.workspace.organization_id, workspace_id=approval.workspace_id,
        event_type="approved_action_failed", execution_id=execution_id, agent_id=approval.agent_id,
        approval_id=approval.pk,
        details={"tool_name": approval.tool_name, "code": error.get("code"), "message": message[:1000]},
    )
    try:
        approved_action_failed_notify(approval=approval, error_message=message)
    except Exception:  # noqa: BLE001 - a notification never changes the run's outcome
        logger.exception("could not notify the approver of approval %s", approval.pk)
    return approval


def approvals_of_execution(*, user, execution_id: int) -> QuerySet:
    """The run's approval requests the user may see, oldest first, with who decided them
    (the run page's and the conversation page's cards)."""
    return (approvals_for_user(user=user).filter(execution_id=execution_id).select_related("resolved_by")
            .order_by("created_at"))


def approval_tools_in_workspace(*, user, workspace) -> list[str]:
    """The tool names of the workspace's requests the user may see, sorted (the inbox's
    tool filter)."""
    mine = approvals_for_user(user=user).filter(workspace=workspace)
    return sorted(mine.order_by().values_list("tool_name", flat=True).distinct())


@dataclass(frozen=True, kw_only=True)
class ApprovalInboxQuery:
    """The inbox's filters, validated by its form. ``status`` is ``""`` for the requests
    waiting for a decision, ``"decided"`` for any decision, or one decided status."""

    agent_id: str | None = None
    tool: str | None = None
    risk: str | None = None
    status: str = ""

    @property
    def waiting(self) -> bool:
        return self.status == ""


@dataclass
class ApprovalInbox:
    rows: QuerySet  # to paginate, newest first, with who decided
    others_waiting: int = 0  # waiting, but for someone else's decision
    recent: list = field(default_factory=list)  # the last decisions, under the waiting ones
    allowed: Callable[[ApprovalRequest], bool] | None = None  # who may decide: per card


def approvals_for_inbox(*, user, workspace, query: ApprovalInboxQuery, recent_limit: int) -> ApprovalInbox:
    """The inbox of ``workspace`` for ``user``. Waiting requests are those the user's role
    may decide (one light query over the waiting ones' roles); the others are counted."""
    mine = approvals_for_user(user=user).filter(workspace=workspace)
    rows = mine
    if query.agent_id:
        rows = rows.filter(agent_id=query.agent_id)
    if query.tool:
        rows = rows.filter(tool_name=query.tool)
    if query.risk:
        rows = rows.filter(risk_context__icontains=query.risk)
    Status = ApprovalRequest.Status
    inbox = ApprovalInbox(rows=rows)
    if query.waiting:
        rows = rows.filter(status=Status.PENDING)
        allowed = approval_resolver(user=user, workspace=workspace)
        candidates = rows.values_list("pk", "approver_roles", "run_started_by_id")
        mine_ids = [pk for pk, roles, starter in candidates if allowed(ApprovalRequest(
            pk=pk, approver_roles=roles, run_started_by_id=starter, workspace=workspace))]
        inbox.others_waiting = len(candidates) - len(mine_ids)
        inbox.allowed = allowed
        rows = rows.filter(pk__in=mine_ids)
        inbox.recent = list(mine.exclude(status=Status.PENDING).select_related("resolved_by")
                            .order_by("-resolved_at", "-pk")[:recent_limit])
    elif query.status == "decided":
        rows = rows.exclude(status=Status.PENDING)
    else:
        rows = rows.filter(status=query.status)
    inbox.rows = rows.select_related("resolved_by").order_by("-created_at", "-pk")
    return inbox

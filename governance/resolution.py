"""Resolving and expiring approval requests, and with them the paused runs (through the
run-control port, ``governance.runs``)."""

from __future__ import annotations

import logging

from django.db import connection, transaction

from common.dberrors import Backoff, error_is_transient, retry_transient
from governance.approvals import (
    approval_authorize,
    approval_decide,
    approval_expire,
    approval_get_for_user,
    approvals_overdue,
)
from governance.grants import ONCE, ScopeChoice, approval_scope_check, approval_scope_record
from governance.models import ApprovalRequest
from governance.previews import EffectApproval, approval_effect_terms, effect_terms_record
from governance.runs import RunLock, run_control
from governance.slack_updates import slack_messages_update_on_commit
from governance.unknown_outcome import approval_kind_check
from rivercore.errors import Conflict
from rivercore.steps import edited_arguments
from rivercore.types.governance import DecisionChannel, ResolutionStatus

logger = logging.getLogger("river.governance")

RESOLVE_ATTEMPTS = 5


def approval_resolve(*, user, approval_id, status: str, modified_args: dict | None = None,
                     comment: str = "", channel: str = DecisionChannel.API,
                     arguments_round: int | None = None, scope: ScopeChoice = ONCE,
                     effect: EffectApproval | None = None) -> ApprovalRequest:
    """Approve, reject or edit-and-approve a paused call, then resume its run.

    Exactly once: the request row is locked and must still be pending; the audit
    entry is written before the resume is queued (on commit). Locks are taken run
    first, then its approval request (as cancelling and expiring do), so concurrent
    resolutions, a cancel and the expiry sweep queue up instead of deadlocking; a
    transient database error (deadlock victim, serialization failure, dropped
    connection) rolls the attempt back and it is tried again, so a caller gets a
    decision or a 409, never a 500. Under a quorum (governance.quorum) a decision may be
    one vote of several: the request stays pending and the run waits; it resumes once,
    with the vote that completes the quorum. ``arguments_round`` is the round of
    arguments the caller saw (409 when someone edited them since)."""
    control = run_control()
    approval = approval_get_for_user(user=user, approval_id=approval_id)
    # Checked again under the row lock; here so a non-approver learns 403, not 400.
    approval_authorize(user=user, approval=approval)
    approval_kind_check(approval)  # an unknown outcome is answered done / not done (governance.unknown_outcome)
    if approval.status != approval.Status.PENDING:
        raise Conflict(f"This approval request is already {approval.status}.", code="already_resolved")
    if status == ResolutionStatus.EDITED_APPROVED:
        modified_args = edited_arguments(approval.tool_name, modified_args)
    else:
        modified_args = None  # only an edit carries arguments
    # Issue 29 §1: the effect must still be the previewed one (checked outside the transaction).
    terms = approval_effect_terms(user=user, approval=approval, status=status, modified_args=modified_args,
                                  effect=effect)
    # Scopes (governance.grants): checked before the lock, recorded with the decision.
    approval_scope_check(approval=approval, choice=scope, status=status,
                         arguments=modified_args or approval.proposed_payload or {})

    def decide_and_resume() -> ApprovalRequest:
        with transaction.atomic():
            control.lock(approval.execution_id)
            decided = approval_decide(
                approval_id=approval.pk, user=user, status=status, modified_args=modified_args, comment=comment,
                channel=channel,
                arguments_round=arguments_round,
                preview_fingerprint=(terms or {}).get("fingerprint"),  # a vote counts for this preview only
            )
            if decided.status == ApprovalRequest.Status.PENDING:  # a vote; the quorum is not complete yet
                return decided
            effect_terms_record(decided, terms)  # issue 29 §1: the write holds to them
            approval_scope_record(approval=decided, user=user, choice=scope)  # scopes: governance.grants
            control.resume_after_resolution(
                decided.execution_id, call_id=decided.tool_call_id,
                resolution={**decided.resolution, "approval_id": str(decided.pk), "tool_name": decided.tool_name},
            )
            # Issue 29 §4: Slack shows the outcome. Registered after the resume, since
            # after-commit work runs in order and this one reads the database first: the
            # run's message leaves before it (tests/governance/test_approval_resolve_queries.py).
            slack_messages_update_on_commit(approval=decided)
        return decided

    # Inside a caller's transaction a failed attempt cannot be replayed here.
    attempts = 1 if connection.in_atomic_block else RESOLVE_ATTEMPTS
    return retry_transient(decide_and_resume, backoff=Backoff(attempts=attempts, base_seconds=0.02, cap_seconds=0.5),
                           is_transient=error_is_transient)


def approvals_expire_due() -> int:
    """Periodic: expire overdue requests and end their runs ``approval_expired``."""
    control = run_control()
    expired = 0
    for approval_id in approvals_overdue():
        execution_id = ApprovalRequest.objects.filter(pk=approval_id).values_list("execution_id", flat=True).first()
        with transaction.atomic():
            # Run first, then its request (the order resolving and cancelling use); a
            # run being resolved right now is skipped and looked at next sweep.
            held = control.lock(execution_id, skip_locked=True) if execution_id is not None else RunLock.GONE
            if held == RunLock.BUSY:
                continue
            approval = approval_expire(approval_id=approval_id)
            if approval is None:
                continue
            if held == RunLock.LOCKED:  # GONE: the run is gone, only its request was left
                control.end_expired(approval.execution_id)
            expired += 1
    return expired

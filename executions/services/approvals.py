"""An approver's decision on a paused call resumes its run; an overdue request ends
its run ``approval_expired``."""

from __future__ import annotations

import logging

from django.db import connection, transaction

from common.dberrors import Backoff, error_is_transient, retry_transient
from executions.models import Execution
from executions.services.finish import execution_end_expired
from executions.services.resume import execution_resume_after_resolution
from rivercore.errors import Conflict, InvalidInput
from rivercore.types.governance import ResolutionStatus

logger = logging.getLogger("river.executions")

RESOLVE_ATTEMPTS = 5


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

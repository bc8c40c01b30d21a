"""A call paused again at write time (docs/approvals.md, "Effect preview").

An approved write checks its effect in its own transaction; when the data moved after
the approval (or the write is over the ceiling) it rolls back, writes nothing, and the
engine pauses the call again with the fresh preview (``ApprovalRequestPayload.reopens``).
Governance then opens a **new** request for the same call rather than re-opening the
decided one: the earlier decision stays in the audit trail as it was made (approved,
by whom, on which preview), and the new request is decided exactly once like any other
(its own row lock, its own resolution step, one resume). Here the new request's preview
gets its note of what moved when the engine could not say (an edited approval, whose
preview only the request keeps), and the move is audited as ``approval_preview_stale``."""

from __future__ import annotations

from governance.audit import audit_record
from governance.models import ApprovalRequest
from rivercore.previews import at_write_mark
from rivercore.types.previews import EffectPreview, StaleNote, stale_note


def reopened_preview(*, execution_id: int, payload: dict) -> dict:
    """The fresh preview of a call paused again at write time, with its note."""
    reopens = payload.get("reopens") or {}
    fresh = EffectPreview.model_validate(payload.get("preview") or {"available": False, "kind": "none"})
    if fresh.stale is None:
        agreed = _agreed(
            execution_id=execution_id, approval_id=reopens.get("approval_id"), fingerprint=reopens.get("fingerprint")
        )
        if agreed is not None and agreed.available and fresh.available:
            fresh.stale = stale_note(agreed, fresh)
            fresh.policy_id = fresh.policy_id or agreed.policy_id
        else:
            fresh.stale = StaleNote(
                previous_fingerprint=str(reopens.get("fingerprint") or ""),
                message="The data changed after the approval. Review the new preview.",
            )
        at_write_mark(fresh.stale)
    return fresh.model_dump(mode="json")


def _agreed(*, execution_id: int, approval_id, fingerprint) -> EffectPreview | None:
    if not approval_id or not fingerprint:
        return None
    previous = (
        ApprovalRequest.objects.filter(pk=approval_id, execution_id=execution_id)
        .only("preview", "preview_edit")
        .first()
    )
    if previous is None:
        return None
    for stored in (previous.preview_edit, previous.preview):
        if stored and stored.get("fingerprint") == fingerprint:
            return EffectPreview.model_validate(stored)
    return None


def reopen_audit(*, approval: ApprovalRequest, organization_id, payload: dict) -> None:
    reopens = payload.get("reopens") or {}
    preview = approval.preview or {}
    audit_record(
        organization_id=organization_id,
        workspace_id=approval.workspace_id,
        event_type="approval_preview_stale",
        execution_id=approval.execution_id,
        agent_id=approval.agent_id,
        approval_id=approval.pk,
        details={
            "tool_name": approval.tool_name,
            "at_write": True,
            "code": reopens.get("code"),
            "follows_approval_id": reopens.get("approval_id"),
            "allowed_by": reopens.get("standing"),
            "approved_fingerprint": reopens.get("fingerprint"),
            "max_rows": reopens.get("max_rows"),
            "fingerprint": preview.get("fingerprint"),
            "rows_affected": preview.get("rows_affected"),
            "stale": preview.get("stale"),
        },
    )

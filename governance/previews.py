"""Effect previews on approval requests (docs/approvals.md, "Effect preview").

A paused write carries its effect (``ApprovalRequest.preview``: the rows it would
change, computed in a transaction that was rolled back). Here:

- ``approval_preview_refresh``: an approver editing the arguments gets the effect of
  the edited call (kept in ``preview_edit``) before they approve it;
- ``approval_effect_terms``: at approval, the effect is computed again and must be
  the one the approver saw (same rows, same before-values: the fingerprint) and
  within their row ceiling; otherwise nothing is decided, the request keeps waiting
  with the fresh preview and a note of what changed (409 ``preview_stale``). What was
  agreed travels with the decision to the write, which checks it again in its own
  transaction (datasources.effects);
- ``approved_write_audit``: the write's audit entry, with the fingerprint and the
  rows it changed.

Previews run the tool's own preview (rivercore.previews) through a port the
executions app installs (it owns the run's context: the agent, its data sources),
so governance never imports executions. They reach a customer database, so they are
never called inside a transaction of River's own database."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from django.db import transaction

from governance.approvals import approval_authorize, approval_get_for_user
from governance.audit import audit_record
from governance.models import ApprovalRequest, Policy
from rivercore.errors import Conflict, InvalidInput
from rivercore.ports import Installed
from rivercore.steps import edited_arguments
from rivercore.tools import get_tool
from rivercore.types.governance import ResolutionStatus
from rivercore.types.previews import EffectPreview, stale_note
from tenancy.models import Workspace

MAX_ROWS_CEILING = 1_000_000


class EffectPreviewer(Protocol):
    def preview(self, approval: ApprovalRequest, arguments: dict) -> EffectPreview:
        """The effect of ``approval``'s call with ``arguments`` (always undone)."""


_previewer: Installed[EffectPreviewer] = Installed("effect previewer", "approvals cannot preview effects")
effect_previewer_install = _previewer.install  # executions installs its implementation in ready()
effect_previewer = _previewer.get


@dataclass(frozen=True)
class EffectApproval:
    """What an approver states about the effect: the fingerprint of the preview they
    saw (optional: the request's current one) and a row ceiling (optional)."""

    fingerprint: str | None = None
    max_rows: int | None = None

    def __post_init__(self):
        if self.max_rows is not None and not (0 <= self.max_rows <= MAX_ROWS_CEILING):
            raise InvalidInput("max_rows must be between 0 and 1000000.", details={"max_rows": ["out of range"]})


def stored_preview(data: dict | None) -> EffectPreview | None:
    return EffectPreview.model_validate(data) if data else None


def approval_preview_refresh(*, user, approval_id, modified_args) -> ApprovalRequest:
    """Preview the call with the approver's edited arguments and keep it on the request
    (``preview_edit``). Only people who may resolve the request may preview it: a
    preview runs the write (and rolls it back) in the customer's database."""
    approval = approval_get_for_user(user=user, approval_id=approval_id)
    approval_authorize(user=user, approval=approval)
    _require_pending(approval)
    arguments = edited_arguments(approval.tool_name, modified_args)
    fresh = effect_previewer().preview(approval, arguments)
    return _store(approval, field="preview_edit", preview=fresh)


def approval_effect_terms(*, user, approval: ApprovalRequest, status: str, modified_args: dict | None,
                          effect: EffectApproval | None) -> dict | None:
    """Check the effect before a decision (outside any transaction) and return what the
    write must hold to (``resolution["effect_terms"]``), or None for a call with nothing
    to hold. Raises 409 when the data changed since the preview, when the edited
    arguments were not previewed, or when a policy requires a preview there is none of."""
    if status == ResolutionStatus.REJECTED:
        return None
    effect = effect or EffectApproval()
    # Under a quorum an edit starts a round on the edited arguments (quorum_args): a
    # plain approval then approves those, and their preview is the edit's.
    round_args = getattr(approval, "quorum_args", None)
    edited = status == ResolutionStatus.EDITED_APPROVED or round_args is not None
    field = "preview_edit" if edited else "preview"
    shown = stored_preview(getattr(approval, field))
    if status == ResolutionStatus.EDITED_APPROVED:
        arguments = modified_args
    else:
        arguments = round_args if round_args is not None else approval.proposed_payload
    tool = get_tool(approval.tool_name)
    if tool is None or tool.preview is None:  # nothing to hold the write to, except a ceiling
        _preview_requirement_check(approval, stored_preview(approval.preview))
        return {"fingerprint": None, "max_rows": effect.max_rows} if effect.max_rows is not None else None
    if edited and (shown is None or shown.arguments != arguments):
        fresh = effect_previewer().preview(approval, arguments)
        _store(approval, field=field, preview=fresh)
        raise Conflict("Preview the edited arguments before approving them: the effect is shown on the card now.",
                       code="preview_required", details={"preview": fresh.public()})
    if shown is None or not shown.available:
        _preview_requirement_check(approval, shown)
        return {"fingerprint": None, "max_rows": effect.max_rows} if effect.max_rows is not None else None
    expected = shown.fingerprint
    if effect.fingerprint and effect.fingerprint != expected:
        raise Conflict("The preview you approved is not the current one; review the card again.",
                       code="preview_outdated", details={"preview": shown.public()})
    # An insert's effect does not depend on the data already there (its fingerprint is its
    # rows): nothing can go stale, so it is not run again (the write checks it anyway).
    inserting = shown.kind == "rows" and shown.operation == "insert"
    fresh = shown if inserting else effect_previewer().preview(approval, arguments)
    if not fresh.available:
        raise Conflict(f"The effect could not be checked again, so nothing was decided: {fresh.reason}",
                       code="preview_unavailable")
    if fresh.fingerprint != expected:
        fresh.stale = stale_note(shown, fresh)
        _store(approval, field=field, preview=fresh, stale=True)
        raise Conflict(fresh.stale.message, code="preview_stale", details={"preview": fresh.public()})
    if effect.max_rows is not None and fresh.rows_affected > effect.max_rows:
        raise Conflict(f"The write would change {fresh.rows_affected} rows, more than your ceiling of "
                       f"{effect.max_rows}; nothing was decided.", code="row_ceiling_exceeded",
                       details={"rows_affected": fresh.rows_affected, "max_rows": effect.max_rows})
    return {"fingerprint": expected, "max_rows": effect.max_rows}


def effect_terms_record(approval: ApprovalRequest, terms: dict | None) -> None:
    """Keep the agreed terms with the decision (caller holds the request's row lock)."""
    if terms is None:
        return
    approval.resolution = {**approval.resolution, "effect_terms": terms}
    approval.save(update_fields=["resolution"])


def approved_write_audit(*, execution_id: int, call_id: str, effect: EffectPreview, terms: dict,
                         workspace_id: int | None = None, agent_id=None) -> None:
    """The audit entry of an approved write: the preview's fingerprint and what it
    changed (the count and the keys), so "what exactly did the agent change" has an
    answer later. A write a scope or a grant let through (``terms["allowed_by"]``: "allowed
    by grant #7 from Ana, …") has no request of its own: its entry names what allowed it."""
    approval = (ApprovalRequest.objects.select_related("workspace")
                .filter(execution_id=execution_id, tool_call_id=call_id).first())
    standing = terms.get("allowed_by")
    if approval is not None and not standing:
        workspace, agent_id, approval_id = approval.workspace, approval.agent_id, approval.pk
    else:
        workspace = Workspace.objects.filter(pk=workspace_id).first() if workspace_id else None
        if workspace is None:
            return
        approval_id = terms.get("approval_id")
    audit_record(
        organization_id=workspace.organization_id, workspace_id=workspace.pk,
        event_type="approved_write_applied", execution_id=execution_id, agent_id=agent_id,
        approval_id=approval_id,
        details={"tool_name": approval.tool_name if approval is not None and not standing else terms.get("tool_name"),
                 "call_id": call_id, "target": effect.target, "operation": effect.operation,
                 "preview_fingerprint": terms.get("fingerprint"), "applied_fingerprint": effect.fingerprint,
                 "max_rows": terms.get("max_rows"), "rows_affected": effect.rows_affected,
                 "keys": [json.loads(key) for key, _ in effect.index],
                 **({"allowed_by": standing, "scope": terms.get("scope"), "grant_id": terms.get("grant_id")}
                    if standing else {})},
    )


def _require_pending(approval: ApprovalRequest) -> None:
    if approval.status != ApprovalRequest.Status.PENDING:
        raise Conflict(f"This approval request is already {approval.status}.", code="already_resolved")


def _preview_requirement_check(approval: ApprovalRequest, shown: EffectPreview | None) -> None:
    policy_id = shown.policy_id if shown is not None else None
    if policy_id and Policy.objects.filter(pk=policy_id, require_preview=True).exists():
        reason = shown.reason if shown is not None else "no preview"
        raise Conflict(f"A policy requires an effect preview to approve this call, and there is none ({reason}). "
                       "Reject it, or edit it into a call that can be previewed.", code="preview_required")


def _store(approval: ApprovalRequest, *, field: str, preview: EffectPreview, stale: bool = False) -> ApprovalRequest:
    """Keep a fresh preview on a still-pending request (its row locked). A preview that
    went stale is audited (the data moved under a pending decision); a preview of an
    edit is not (it decides nothing)."""
    with transaction.atomic():
        row = ApprovalRequest.objects.select_for_update(of=("self",)).select_related("workspace").get(pk=approval.pk)
        _require_pending(row)
        setattr(row, field, preview.model_dump(mode="json"))
        row.save(update_fields=[field])
        if stale:
            audit_record(
                organization_id=row.workspace.organization_id, workspace_id=row.workspace_id,
                event_type="approval_preview_stale", execution_id=row.execution_id, agent_id=row.agent_id,
                approval_id=row.pk,
                details={"tool_name": row.tool_name, "edited": field == "preview_edit",
                         "fingerprint": preview.fingerprint, "rows_affected": preview.rows_affected,
                         "stale": preview.stale.model_dump(mode="json") if preview.stale else None},
            )
    setattr(approval, field, getattr(row, field))
    return approval

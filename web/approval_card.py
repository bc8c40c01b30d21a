"""Pages of approvals: one request's page and the inline approval card (htmx); the
inbox, which shows the current workspace, is web.approvals.

Session auth, login required. Each view parses (a Django form), authorizes through a
tenant-scoped selector, calls one service and renders. The card endpoint answers an
htmx request with the card alone; errors (400/403/409) come back inside the card
with their status code, and ``static/approvals.js`` lets htmx swap them in. Other
pages that show a run's requests (the run page) embed the same card
(``approval_card``).
"""

from __future__ import annotations

import json

from django import forms
from django.http import Http404
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from common.people import person_label
from governance.approvals import approval_get_for_user, may_resolve, self_approval_refused
from governance.models import ApprovalRequest
from governance.previews import MAX_ROWS_CEILING, EffectApproval
from governance.resolution import approval_resolve
from rivercore.errors import NotFound, RiverError
from rivercore.tools import get_tool
from rivercore.types.governance import DecisionChannel, ResolutionStatus
from web.approval_card_quorum import quorum_card
from web.approval_preview import effect_card
from web.approval_scopes import card_scope, scope_from_form
from web.page_tools import page_login_required


class ResolveForm(forms.Form):
    decision = forms.ChoiceField(choices=[(ResolutionStatus.APPROVED.value, "Approve"),
                                          (ResolutionStatus.REJECTED.value, "Reject"),
                                          (ResolutionStatus.EDITED_APPROVED.value, "Edit and approve")])
    resolution_comment = forms.CharField(required=False, max_length=4000)
    modified_args = forms.CharField(required=False, max_length=100_000, strip=False)
    # Issue 29 §1: the preview the approver saw, and their row ceiling (web.approval_preview).
    preview_fingerprint = forms.RegexField(r"^[0-9a-f]{64}$", required=False)
    max_rows = forms.IntegerField(required=False, min_value=0, max_value=MAX_ROWS_CEILING)
    arguments_round = forms.IntegerField(required=False, min_value=0)  # quorum: the round the approver saw

    def clean(self):
        data = super().clean()
        if data.get("decision") != ResolutionStatus.EDITED_APPROVED:
            data["modified_args"] = None
            return data
        text = (data.get("modified_args") or "").strip()
        if not text:
            self.add_error("modified_args", "Enter the edited arguments as a JSON object.")
            return data
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            self.add_error("modified_args", f"Not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).")
            return data
        if not isinstance(value, dict):
            self.add_error("modified_args", "The arguments must be a JSON object ({...}).")
            return data
        data["modified_args"] = value
        return data


def _pretty(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _shown(value) -> str:
    """A value as a person reads it: text as is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _flat(value, prefix: str = "") -> dict[str, object]:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}``; lists and scalars are leaves."""
    if isinstance(value, dict) and value:
        flat: dict[str, object] = {}
        for key in sorted(value):
            flat.update(_flat(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix or "(arguments)": value}


def json_changes(old: dict, new: dict) -> list[dict]:
    """What an edit changed, field by field (dotted paths): ``change`` is ``changed``,
    ``added`` or ``removed``. static/approvals.js shows the same list while one edits."""
    before, after = _flat(old or {}), _flat(new or {})
    changes = []
    for key in sorted(before.keys() | after.keys()):
        if key not in after:
            changes.append({"path": key, "change": "removed", "old": _shown(before[key]), "new": ""})
        elif key not in before:
            changes.append({"path": key, "change": "added", "old": "", "new": _shown(after[key])})
        elif before[key] != after[key]:
            changes.append({"path": key, "change": "changed", "old": _shown(before[key]), "new": _shown(after[key])})
    return changes


def approval_card(
    *, user, approval: ApprovalRequest, error: dict | None = None, submitted: dict | None = None,
    can_resolve: bool | None = None,
) -> dict:
    """Everything ``approvals/_card.html`` shows for one request; pages that embed the
    card (the inbox, the run page) build its context with this. A page of cards passes
    ``can_resolve`` from ``approval_resolver`` instead of asking per card."""
    tool = get_tool(approval.tool_name)
    submitted = submitted or {}
    resolution = approval.resolution or {}
    context = {
        "approval": approval,
        "pending": approval.status == ApprovalRequest.Status.PENDING,
        "can_resolve": may_resolve(user=user, approval=approval) if can_resolve is None else can_resolve,
        "self_started": self_approval_refused(user=user, approval=approval),
        "requester": person_label(approval.run_started_by) if approval.run_started_by_id else "",
        "proposed_json": _pretty(approval.proposed_payload),
        "editor_text": submitted.get("modified_args") or _pretty(approval.proposed_payload),
        "comment": submitted.get("resolution_comment", ""),
        "schema_json": _pretty(tool.input_model.model_json_schema()) if tool else "",
        "edited_json": _pretty(resolution["modified_args"]) if resolution.get("modified_args") else "",
        "changes": json_changes(approval.proposed_payload, resolution["modified_args"])
        if resolution.get("modified_args") else [],
        "proposed_script_id": f"approval-{approval.pk}-proposed",
        "proposed_items": [(key, _shown(value)) for key, value in sorted((approval.proposed_payload or {}).items())],
        "error": error,
        "edit_open": bool(error) and submitted.get("decision") == ResolutionStatus.EDITED_APPROVED,
        "effect": effect_card(approval=approval, submitted=submitted),  # issue 29 §1
        **card_scope(approval, submitted=submitted),  # scopes: web.approval_scopes
    }
    context.update(quorum_card(user=user, approval=approval, context=context, submitted=submitted))
    return context


def _approval_or_404(user, approval_id) -> ApprovalRequest:
    try:
        return approval_get_for_user(user=user, approval_id=approval_id)
    except NotFound as exc:
        raise Http404(exc.message) from None


STALE_ERROR = "Nothing was decided: the effect changed. Look at the new preview before you decide again."


@page_login_required
@require_GET
def approval_page(request, approval_id):
    approval = _approval_or_404(request.user, approval_id)
    return render(request, "approvals/detail.html", {"card": approval_card(user=request.user, approval=approval)})


@page_login_required
@require_POST
def approval_resolve_card(request, approval_id):
    approval = _approval_or_404(request.user, approval_id)
    form = ResolveForm(request.POST)
    status_code, error = 200, None
    if not form.is_valid():
        status_code = 400
        error = {"message": "Nothing was changed: the form has errors.",
                 "details": {field: list(messages) for field, messages in form.errors.items()}}
    else:
        data = form.cleaned_data
        try:
            approval = approval_resolve(
                user=request.user, approval_id=approval.pk, status=data["decision"],
                modified_args=data["modified_args"], comment=data["resolution_comment"],
                effect=EffectApproval(fingerprint=data.get("preview_fingerprint") or None,
                                      max_rows=data.get("max_rows")),
                channel=DecisionChannel.INBOX,
                arguments_round=data.get("arguments_round"),
                scope=scope_from_form(request.POST),  # scopes: web.approval_scopes
            )
        except RiverError as exc:
            status_code = exc.status_code
            details = exc.details if isinstance(exc.details, dict) else {}
            # Field messages only (a stale preview's details carry the preview, shown on the card).
            # A stale preview's note of what moved is shown once, above the fresh table.
            message = STALE_ERROR if getattr(exc, "code", "") == "preview_stale" else exc.message
            error = {"message": message,
                     "details": {field: msgs for field, msgs in details.items() if isinstance(msgs, list)}}
            approval.refresh_from_db()
    card = approval_card(user=request.user, approval=approval, error=error, submitted=request.POST if error else None)
    template = "approvals/_card.html" if request.headers.get("HX-Request") else "approvals/detail.html"
    response = render(request, template, {"card": card}, status=status_code)
    response["X-River-Card"] = "1"  # approvals.js swaps error responses that carry this marker
    return response


urlpatterns = [
    path("approvals/<uuid:approval_id>/", approval_page, name="approval-page"),
    path("approvals/<uuid:approval_id>/resolve", approval_resolve_card, name="approval-card-resolve"),
]

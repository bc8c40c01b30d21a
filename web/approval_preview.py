"""The effect preview on the approval card (issue 29 §1, docs/approvals.md "Effect
preview"): what the card shows of a request's preview, and the endpoint the card's
editor calls to preview edited arguments before they are approved. Both read and
write through governance.previews, the same service the API uses."""

from __future__ import annotations

import json

from django import forms
from django.http import Http404
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_POST

from governance.approvals import approval_get_for_user
from governance.models import ApprovalRequest
from governance.previews import approval_preview_refresh, stored_preview
from rivercore.errors import NotFound, RiverError
from rivercore.types.previews import EffectPreview
from web.page_tools import page_login_required


def _cell(value) -> str:
    if value is None:
        return "null"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def effect_table(preview: EffectPreview) -> dict:
    """Headers and rows of the before/after table: the key, then each changed column
    as before → after (an update), the values that go (a delete) or come (an insert)."""
    changes = preview.changes
    keys = list(changes[0].key) if changes else []
    if preview.operation == "update":
        columns = preview.columns
    else:
        side = "before" if preview.operation == "delete" else "after"
        columns = sorted({c for change in changes for c in (getattr(change, side) or {})})
    rows = []
    for change in changes:
        before, after = change.before or {}, change.after or {}
        cells = []
        for column in columns:
            old = _cell(before.get(column)) if column in before else ""
            new = _cell(after.get(column)) if column in after else ""
            cells.append({"old": old, "new": new, "changed": old != new and preview.operation == "update"})
        rows.append({"key": ", ".join(f"{k} {_cell(v)}" for k, v in change.key.items()), "cells": cells})
    return {"keys": keys, "columns": columns, "rows": rows}


def _view(data: dict | None) -> dict | None:
    preview = stored_preview(data)
    if preview is None:
        return None
    return {"p": preview, "table": effect_table(preview) if preview.kind == "rows" else None,
            "short": preview.fingerprint[:12]}


def effect_card(*, approval: ApprovalRequest, submitted: dict | None = None) -> dict:
    """The card's ``effect`` context: the proposed call's preview and the edited one's."""
    return {"preview": _view(approval.preview), "edit": _view(approval.preview_edit),
            "max_rows": (submitted or {}).get("max_rows", "")}


class PreviewForm(forms.Form):
    modified_args = forms.CharField(max_length=100_000, strip=False)

    def clean_modified_args(self):
        try:
            value = json.loads(self.cleaned_data["modified_args"])
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("The arguments must be a JSON object ({...}).")
        return value


@page_login_required
@require_POST
def approval_preview_card(request, approval_id):
    """Preview the editor's arguments; answers the card's edit-preview fragment (errors
    inside it, with their status code)."""
    try:
        approval = approval_get_for_user(user=request.user, approval_id=approval_id)
    except NotFound as exc:
        raise Http404(exc.message) from None
    form = PreviewForm(request.POST)
    status_code, error = 200, None
    if not form.is_valid():
        status_code, error = 400, "; ".join(form.errors.get("modified_args", ["Enter the arguments."]))
    else:
        try:
            approval = approval_preview_refresh(user=request.user, approval_id=approval.pk,
                                                modified_args=form.cleaned_data["modified_args"])
        except RiverError as exc:
            status_code = exc.status_code
            details = exc.details if isinstance(exc.details, dict) else {}
            error = exc.message + "".join(f" {field}: {'; '.join(map(str, msgs))}." for field, msgs in details.items()
                                          if isinstance(msgs, list))
    context = {"approval": approval, "effect": effect_card(approval=approval), "error": error}
    response = render(request, "approvals/_card_preview_edit_inner.html", context, status=status_code)
    response["X-River-Card"] = "1"  # approvals.js swaps error responses that carry this marker
    return response


urlpatterns = [
    path("approvals/<uuid:approval_id>/preview", approval_preview_card, name="approval-card-preview"),
]

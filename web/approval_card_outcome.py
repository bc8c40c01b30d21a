"""The "unknown outcome" card's answer (issue 31 §1, docs/mcp.md "Durability").

An MCP write River sent and whose result was never recorded pauses its run on an
approval request of kind ``unknown_outcome``; the card (``approvals/_card_outcome.html``,
shown by ``approvals/_card.html`` for that kind) asks a person whether it happened:
**Done** or **Not done, retry**. This view parses the form, answers through
``unknown_outcome_confirm`` (the approval rules, the audit entry, the resume) and
re-renders the card in place, errors inside it with their status code, like the
approval card (web.approval_card).
"""

from __future__ import annotations

from django import forms
from django.http import Http404
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_POST

from governance.approvals import approval_get_for_user
from governance.unknown_outcome import unknown_outcome_confirm
from rivercore import unknown_outcome
from rivercore.errors import NotFound, RiverError
from rivercore.types.governance import DecisionChannel
from web.approval_card import approval_card
from web.page_tools import page_login_required


class ConfirmOutcomeForm(forms.Form):
    outcome = forms.ChoiceField(choices=[(unknown_outcome.DONE, "Done"), (unknown_outcome.NOT_DONE, "Not done, retry")])
    resolution_comment = forms.CharField(required=False, max_length=4000)


@page_login_required
@require_POST
def approval_confirm_outcome_card(request, approval_id):
    try:
        approval = approval_get_for_user(user=request.user, approval_id=approval_id)  # 404 outside
    except NotFound as exc:
        raise Http404(exc.message) from None
    form = ConfirmOutcomeForm(request.POST)
    status_code, error = 200, None
    if not form.is_valid():
        status_code = 400
        error = {
            "message": "Nothing was changed: the form has errors.",
            "details": {field: list(messages) for field, messages in form.errors.items()},
        }
    else:
        try:
            approval = unknown_outcome_confirm(
                user=request.user,
                approval_id=approval.pk,
                outcome=form.cleaned_data["outcome"],
                comment=form.cleaned_data["resolution_comment"],
                channel=DecisionChannel.INBOX,
            )
        except RiverError as exc:
            status_code = exc.status_code
            details = exc.details if isinstance(exc.details, dict) else {}
            error = {
                "message": exc.message,
                "details": {field: msgs for field, msgs in details.items() if isinstance(msgs, list)},
            }
            approval.refresh_from_db()
    card = approval_card(user=request.user, approval=approval, error=error, submitted=request.POST if error else None)
    template = "approvals/_card.html" if request.headers.get("HX-Request") else "approvals/detail.html"
    response = render(request, template, {"card": card}, status=status_code)
    response["X-River-Card"] = "1"  # approvals.js swaps error responses that carry this marker
    return response


urlpatterns = [
    path(
        "approvals/<uuid:approval_id>/confirm-outcome",
        approval_confirm_outcome_card,
        name="approval-card-confirm-outcome",
    ),
]

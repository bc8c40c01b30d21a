"""Scopes on the approval card and the standing grants page (/approvals/grants/).

The card's Approve form carries a scope choice (``scope``: once, run, session, grant,
with the grant's terms in ``grant_expires_in_days``, ``grant_max_rows`` and
``grant_condition``); ``scope_from_form`` turns it into the value the resolve service
takes, with the API's validation (``governance.grants.approval_scope_parse``). The
grants page lists the current workspace's grants through ``grants_for_user`` (the API's
selector) and revokes through ``grant_revoke`` (the API's service), so both answer the
same and audit the same.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from agents.selectors import agent_choices
from governance.grants import (
    ApprovalScope,
    GrantState,
    ScopeChoice,
    approval_scope_parse,
    grant_may_revoke,
    grant_revoke,
    grant_state,
    grants_for_user,
)
from governance.models import ApprovalRequest
from rivercore.errors import RiverError
from web.context import current_workspace
from web.page_tools import mark_invalid_fields, page_login_required, paginate

SCOPE_LABELS = {
    ApprovalScope.ONCE: "This call only",
    ApprovalScope.RUN: "Identical calls for the rest of this run",
    ApprovalScope.SESSION: "Identical calls for the rest of this conversation",
    ApprovalScope.GRANT: "A standing grant: this agent may make this kind of call, same target, without asking",
}


def scope_from_form(post) -> ScopeChoice:
    """The card's scope fields as the resolve service's value; InvalidInput names the field."""
    scope = post.get("scope") or ApprovalScope.ONCE.value
    grant = None
    if scope == ApprovalScope.GRANT:
        grant = {"expires_in_days": post.get("grant_expires_in_days", ""),
                 "max_rows": post.get("grant_max_rows", ""),
                 "condition": post.get("grant_condition", "")}
    return approval_scope_parse(scope=scope, grant=grant)


def card_scope(approval: ApprovalRequest, *, submitted=None) -> dict:
    """What the card's scope parts show (templates/approvals/_card_scope*.html)."""
    submitted = submitted or {}
    resolution = approval.resolution or {}
    # Under a quorum a request is decided for its own call only (governance.grants refuses more).
    several = (approval.required_approvals or 1) > 1
    return {"scope_choices": [] if several else [(s.value, label) for s, label in SCOPE_LABELS.items()],
            "scope_chosen": submitted.get("scope") or ApprovalScope.ONCE.value,
            "scope_submitted": submitted,
            "scope_max_days": settings.RIVER_APPROVAL_GRANT_MAX_DAYS,
            "scope_label": SCOPE_LABELS.get(approval.scope, approval.scope),
            "scope_grant_id": resolution.get("grant_id")}


class GrantFilters(forms.Form):
    state = forms.ChoiceField(required=False, choices=[("", "Active"), (GrantState.EXPIRED.value, "Expired"),
                                                       (GrantState.REVOKED.value, "Revoked"), ("all", "All")])


@page_login_required
@require_GET
def grants_page(request):
    user = request.user
    workspace = current_workspace(request)
    form = GrantFilters(request.GET or None)
    status_code, state = 200, GrantState.ACTIVE.value
    if form.is_bound:
        if form.is_valid():
            state = form.cleaned_data["state"] or GrantState.ACTIVE.value
        else:
            status_code = 400
            mark_invalid_fields(form)
    page, rows = None, []
    if workspace is not None and status_code == 200:
        grants = grants_for_user(user=user, workspace=workspace, state=None if state == "all" else state)
        page = paginate(request, grants)
        names = dict(agent_choices(workspace=workspace))
        rows = [{"grant": g, "agent": names.get(str(g.agent_id), str(g.agent_id)), "state": grant_state(g).value,
                 "may_revoke": g.revoked_at is None and grant_may_revoke(user=user, grant=g)}
                for g in page.object_list]
    return render(request, "approvals/grants.html",
                  {"workspace": workspace, "form": form, "page": page, "rows": rows, "state": state},
                  status=status_code)


@page_login_required
@require_POST
def grant_revoke_page(request, grant_id):
    try:
        grant = grant_revoke(user=request.user, grant_id=grant_id)
    except RiverError as exc:
        if exc.status_code == 404:
            raise Http404(exc.message) from None
        if exc.status_code == 403:
            raise DjangoPermissionDenied(exc.message) from None
        messages.error(request, exc.message)  # 409: it was revoked meanwhile
        return redirect("approval-grants")
    messages.success(request, f"Grant #{grant.pk} is revoked: its agent asks again for such calls.")
    return redirect("approval-grants")


urlpatterns = [
    path("approvals/grants/", grants_page, name="approval-grants"),
    path("approvals/grants/<int:grant_id>/revoke", grant_revoke_page, name="approval-grant-revoke-page"),
]

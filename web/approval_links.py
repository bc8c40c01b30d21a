"""The page an e-mail's Approve or Reject link opens (``/approvals/link/<token>``).

Sign-in required: the link names its recipient, it does not sign anyone in. A GET shows
the request and a confirm form and never decides; the POST decides through
``governance.email_links.approval_link_decide`` (the link's checks, then the same
``approval_resolve`` as the card and the API). A link that cannot decide (altered,
expired, used, someone else's) gets a page that says so with a 4xx, never a 500.
"""

from __future__ import annotations

from django import forms
from django.shortcuts import render
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from common.people import person_label
from governance.approvals import approval_authorize, approval_get_for_user
from governance.email_links import LinkRefused, approval_link_decide, approval_link_read
from governance.models import ApprovalRequest
from rivercore.errors import NotFound, PermissionDenied, RiverError
from web.approval_card import approval_card
from web.page_tools import page_login_required

TOKEN_MAX_LENGTH = 400


class ConfirmForm(forms.Form):
    resolution_comment = forms.CharField(required=False, max_length=4000, label="Comment (optional)")


def _page(request, *, status: int, **context):
    # The token is in this page's address: the site's Referrer-Policy (same-origin) keeps it
    # from other sites; no-referrer would make the browser send "Origin: null" with the
    # confirm form, which CSRF protection rightly refuses.
    return render(request, "approvals/link_confirm.html", context, status=status)


def _problem(request, exc: RiverError, *, title: str):
    problem = {"title": title, "message": exc.message, "status": exc.status_code}
    return _page(request, status=exc.status_code, problem=problem)


_TITLES = {
    "link_invalid": "This link does not work",
    "link_expired": "This link has expired",
    "link_used": "This link was already used",
    "link_other_user": "This link is for someone else",
}


@never_cache
@page_login_required
@require_http_methods(["GET", "POST"])
def approval_link_page(request, token: str):
    if len(token) > TOKEN_MAX_LENGTH:
        return _problem(request, LinkRefused("This link is not valid.", code="link_invalid", status_code=400),
                        title=_TITLES["link_invalid"])
    try:
        link = approval_link_read(token=token, user=request.user)
        approval = approval_get_for_user(user=request.user, approval_id=link.approval_id)
    except LinkRefused as exc:
        return _problem(request, exc, title=_TITLES[exc.code])
    except NotFound as exc:
        return _problem(request, exc, title="Request not found")
    form = ConfirmForm(request.POST if request.method == "POST" else None)
    context = {"link": link, "approval": approval, "form": form, "token": token,
               "card": approval_card(user=request.user, approval=approval, can_resolve=False),
               "requester": person_label(approval.run_started_by) if approval.run_started_by_id else ""}
    if approval.status != ApprovalRequest.Status.PENDING:
        return _page(request, status=409, decided=True, **context)
    try:
        approval_authorize(user=request.user, approval=approval)
    except PermissionDenied as exc:
        return _page(request, status=403, refused=exc.message, **context)
    if request.method == "GET":
        return _page(request, status=200, **context)
    if not form.is_valid():
        return _page(request, status=400, **context)
    try:
        decided = approval_link_decide(user=request.user, token=token,
                                       comment=form.cleaned_data["resolution_comment"])
    except LinkRefused as exc:
        return _problem(request, exc, title=_TITLES[exc.code])
    except RiverError as exc:
        approval.refresh_from_db()
        context["card"] = approval_card(user=request.user, approval=approval, can_resolve=False)
        return _page(request, status=exc.status_code, error=exc.message,
                     decided=approval.status != ApprovalRequest.Status.PENDING, **context)
    context.update(approval=decided, card=approval_card(user=request.user, approval=decided, can_resolve=False))
    return _page(request, status=200, done=True, **context)


urlpatterns = [
    path("approvals/link/<str:token>", approval_link_page, name="approval-link"),
]

"""The approvals inbox (/approvals/) of the current workspace.

Requests waiting for the user's decision are cards (the same card as the run page's),
newest first, 20 to a page, with the last ten decided below; other decisions are a
table. Filters: ``agent``, ``tool``, ``status`` (empty: waiting, the default; or a
decision) and ``risk`` (words in the risk note). The
page follows the workspace's WebSocket feed (static/approvals.js): a new request appears
and a decided one leaves without a reload, by fetching ``?part=list`` again.
"""

from __future__ import annotations

from django import forms
from django.core.paginator import Paginator
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET

from agents.selectors import agent_choices
from executions.selectors import questions_for_user
from governance.approvals import ApprovalInboxQuery, approval_tools_in_workspace, approvals_for_inbox
from governance.models import ApprovalRequest
from web.approval_card import approval_card
from web.context import current_workspace
from web.page_tools import mark_invalid_fields, page_login_required

PER_PAGE = 20
RECENTLY_DECIDED = 10
Status = ApprovalRequest.Status


class InboxFilters(forms.Form):
    status = forms.ChoiceField(required=False, choices=[("", "Waiting for a decision"),
                                                        *[(s.value, s.label) for s in Status if s != Status.PENDING],
                                                        ("decided", "Any decision")])
    agent = forms.ChoiceField(required=False)
    tool = forms.ChoiceField(required=False)
    risk = forms.CharField(required=False, max_length=100, label="Risk mentions",
                           widget=forms.TextInput(attrs={"type": "search", "placeholder": "e.g. refund"}))

    def __init__(self, *args, agents, tools, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "Any agent"), *agents]
        self.fields["tool"].choices = [("", "Any tool"), *[(t, t) for t in tools]]


@page_login_required
@require_GET
def approvals_inbox(request):
    user = request.user
    workspace = current_workspace(request)
    agents = agent_choices(workspace=workspace) if workspace else []
    tools = approval_tools_in_workspace(user=user, workspace=workspace) if workspace else []
    form = InboxFilters(request.GET or None, agents=agents, tools=tools)
    data, status_code = {}, 200
    if form.is_bound:
        if form.is_valid():
            data = form.cleaned_data
        else:
            status_code = 400
            mark_invalid_fields(form)
    inbox_query = ApprovalInboxQuery(agent_id=data.get("agent") or None, tool=data.get("tool") or None,
                                     risk=data.get("risk") or None, status=data.get("status") or "")
    waiting = inbox_query.waiting
    page = None
    cards, recent, others_waiting = [], [], 0
    if status_code == 200 and workspace is not None:
        inbox = approvals_for_inbox(user=user, workspace=workspace, query=inbox_query, recent_limit=RECENTLY_DECIDED)
        recent, others_waiting = inbox.recent, inbox.others_waiting
        page = Paginator(inbox.rows, PER_PAGE).get_page(request.GET.get("page"))
        if inbox.allowed is not None:
            cards = [approval_card(user=user, approval=a, can_resolve=inbox.allowed(a)) for a in page.object_list]
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("part", None)
    context = {
        "workspace": workspace, "form": form, "page": page, "cards": cards, "waiting": waiting,
        "questions": questions_for_user(user=user, workspace=workspace) if waiting else [],
        "recent": recent, "others_waiting": others_waiting,
        "query": query.urlencode(), "filtered": any(data.get(n) for n in ("agent", "tool", "risk", "status")),
    }
    template = "approvals/_inbox_list.html" if request.GET.get("part") == "list" else "approvals/inbox.html"
    return render(request, template, context, status=status_code)


urlpatterns = [
    path("approvals/", approvals_inbox, name="approvals-inbox"),
]

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
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.urls import path, reverse_lazy
from django.views.decorators.http import require_GET

from agents.models import Agent
from governance.approvals import approval_resolver, approvals_for_user
from governance.models import ApprovalRequest
from web.approval_card import approval_card
from web.context import current_workspace

LOGIN_URL = reverse_lazy("login")
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


@login_required(login_url=LOGIN_URL)
@require_GET
def approvals_inbox(request):
    user = request.user
    workspace = current_workspace(request)
    mine = approvals_for_user(user=user).filter(workspace=workspace) if workspace else ApprovalRequest.objects.none()
    agents = [(str(pk), name) for pk, name in
              Agent.objects.filter(workspace=workspace).order_by("name").values_list("pk", "name")] if workspace else []
    tools = list(mine.order_by().values_list("tool_name", flat=True).distinct())
    form = InboxFilters(request.GET or None, agents=agents, tools=sorted(tools))
    data, status_code = {}, 200
    if form.is_bound:
        if form.is_valid():
            data = form.cleaned_data
        else:
            status_code = 400
            for name in form.errors:
                form.fields[name].widget.attrs.update(
                    {"aria-invalid": "true", "aria-describedby": f"{form[name].id_for_label}-error"})
    rows = mine
    if data.get("agent"):
        rows = rows.filter(agent_id=data["agent"])
    if data.get("tool"):
        rows = rows.filter(tool_name=data["tool"])
    if data.get("risk"):
        rows = rows.filter(risk_context__icontains=data["risk"])
    chosen = data.get("status") or ""
    waiting = chosen == ""
    if waiting:
        rows = rows.filter(status=Status.PENDING)
    elif chosen == "decided":
        rows = rows.exclude(status=Status.PENDING)
    else:
        rows = rows.filter(status=chosen)
    page = None
    cards, recent, others_waiting = [], [], 0
    if status_code == 200 and workspace is not None:
        if waiting:
            # Waiting for *you*: the requests your role may decide (one light query over
            # the waiting ones' roles); the others are only counted.
            allowed = approval_resolver(user=user, workspace=workspace)
            candidates = rows.values_list("pk", "approver_roles", "run_started_by_id")
            mine_ids = [pk for pk, roles, starter in candidates if allowed(ApprovalRequest(
                pk=pk, approver_roles=roles, run_started_by_id=starter, workspace=workspace))]
            others_waiting = len(candidates) - len(mine_ids)
            rows = rows.filter(pk__in=mine_ids)
            recent = list(mine.exclude(status=Status.PENDING).select_related("resolved_by")
                          .order_by("-resolved_at", "-pk")[:RECENTLY_DECIDED])
        ordered = rows.select_related("resolved_by").order_by("-created_at", "-pk")
        page = Paginator(ordered, PER_PAGE).get_page(request.GET.get("page"))
        if waiting:
            cards = [approval_card(user=user, approval=a, can_resolve=allowed(a)) for a in page.object_list]
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("part", None)
    context = {
        "workspace": workspace, "form": form, "page": page, "cards": cards, "waiting": waiting,
        "recent": recent, "others_waiting": others_waiting,
        "query": query.urlencode(), "filtered": any(data.get(n) for n in ("agent", "tool", "risk", "status")),
    }
    template = "approvals/_inbox_list.html" if request.GET.get("part") == "list" else "approvals/inbox.html"
    return render(request, template, context, status=status_code)


urlpatterns = [
    path("approvals/", approvals_inbox, name="approvals-inbox"),
]

"""The search box's results page (/search/?q=): the current workspace's agents, runs,
conversations, triggers and audit entries that match, grouped by kind.

Each kind is read through its app's selector (``agents_search``, ``executions_search``,
``sessions_search``, ``triggers_search``, ``audit_entries_search``), scoped to the
workspace the user chose in the frame and to what they may read there; the matching
itself is ``common/search.py`` (PostgreSQL full-text search, ``LIKE`` on SQLite). A page
costs five queries besides the frame's, whatever the number of runs
(docs/ui.md, "Search").
"""

from __future__ import annotations

from django import forms
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET

from agents.selectors import agents_search
from common.search import MAX_QUERY_LENGTH, query_words
from executions.selectors import executions_search, sessions_search
from governance.selectors import audit_entries_search
from triggers.selectors import triggers_search
from web.audit import ACTIONS
from web.context import current_workspace
from web.page_tools import mark_invalid_fields, page_login_required

# Results shown per kind; the runs group links to the runs list's text filter for more.
PER_KIND = 10


class SearchForm(forms.Form):
    q = forms.CharField(max_length=MAX_QUERY_LENGTH, required=False, label="Search",
                        widget=forms.TextInput(attrs={"type": "search"}))

    def clean_q(self) -> str:
        return self.cleaned_data["q"].strip()


@page_login_required
@require_GET
def search_page(request):
    workspace = current_workspace(request)
    form = SearchForm(request.GET)
    context = {"workspace": workspace, "form": form, "q": "", "groups": None}
    if not form.is_valid():
        mark_invalid_fields(form)
        return render(request, "search/results.html", context, status=400)
    text = form.cleaned_data["q"]
    context["q"] = text
    if workspace is None or not text:
        return render(request, "search/results.html", context)
    matching = {"user": request.user, "workspace": workspace, "text": text, "limit": PER_KIND}
    audit = audit_entries_search(**matching)
    for entry in audit:
        entry.action_label = ACTIONS.get(entry.event_type, entry.event_type.replace("_", " ").capitalize())
    context["groups"] = {
        "agents": agents_search(**matching),
        "runs": executions_search(**matching),
        "sessions": sessions_search(**matching),
        "triggers": triggers_search(**matching),
        "audit": audit,
    }
    context["total"] = sum(len(rows) for rows in context["groups"].values())
    context["words"] = query_words(text)
    context["per_kind"] = PER_KIND
    return render(request, "search/results.html", context)


urlpatterns = [
    path("search/", search_page, name="search"),
]

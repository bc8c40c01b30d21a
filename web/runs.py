"""The runs list (/runs/) of the current workspace and its live row fragment.

The page shows the workspace the user chose in the frame (``web.context``), newest
run first, 25 to a page, with a fixed number of queries whatever the number of runs:
the frame's, the agents for the filter, the page's count and its rows (agents joined).
Replays are not runs (docs/replay.md); ``replays=only`` lists the workspace's replays
instead.
"""

from __future__ import annotations

import datetime as dt
import uuid
from urllib.parse import urlencode

from django import forms
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET

from agents.selectors import agent_choices
from common.days import day_from_text, day_window
from common.ids import id_from_text
from common.search import MAX_QUERY_LENGTH
from executions.models import Execution
from executions.selectors import (
    EXECUTION_SORT_DEFAULT,
    ExecutionFilters,
    execution_get_for_user,
    execution_list_rows,
    execution_replays_filter,
    executions_filter,
)
from rivercore.contracts import TriggerType
from rivercore.errors import NotFound
from rivercore.outcome import Outcome
from tenancy.selectors import requester_choices
from web.context import current_workspace
from web.page_tools import mark_invalid_fields, page_login_required, query_without_page

RUNS_PER_PAGE = 25
# The list's columns a reader may sort by (executions.selectors.EXECUTION_SORTS), as the
# header shows them; the form's ``sort`` accepts these keys only, ``-`` first for descending.
SORT_COLUMNS = {"id": "Run", "status": "Status", "outcome": "Outcome", "agent": "Agent", "trigger": "Trigger",
                "started": "Started", "turns": "Turns", "tokens": "Tokens", "cost": "Cost"}
SORT_CHOICES = [("", "Newest first")] + [
    (f"{prefix}{key}", f"{label} {'descending' if prefix else 'ascending'}")
    for key, label in SORT_COLUMNS.items() for prefix in ("", "-")]


class DayField(forms.DateField):
    """An optional day as the API's run list takes it: ``YYYY-MM-DD`` only
    (``common.days.day_from_text``), what a date input sends."""

    def __init__(self, **kwargs):
        super().__init__(required=False, widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"), **kwargs)

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if isinstance(value, dt.date):
            return value
        day = day_from_text(value.strip() if isinstance(value, str) else value)
        if day is None:
            raise forms.ValidationError("Enter a day as YYYY-MM-DD.", code="invalid")
        return day


class RunFilters(forms.Form):
    """The list's GET filters; the overview links to them by these names, and the API's
    run list (``GET /api/v1/executions/``) takes the same ones (``executions_filter``)."""

    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *Execution.Status.choices])
    outcome = forms.ChoiceField(required=False, choices=[("", "Any outcome"),
                                                         *((o.value, o.value.replace("_", " ")) for o in Outcome)])
    agent = forms.ChoiceField(required=False)
    trigger_type = forms.ChoiceField(required=False, label="Trigger",
                                     choices=[("", "Any trigger")] + [(t.value, t.value.title()) for t in TriggerType])
    since = DayField(label="From", help_text="Runs queued on or after this day.")
    until = DayField(label="To", help_text="Runs queued on or before this day.")
    session = forms.CharField(required=False, label="Conversation", max_length=19,
                              widget=forms.TextInput(attrs={"inputmode": "numeric", "placeholder": "Session id"}))
    requester = forms.ChoiceField(required=False)
    q = forms.CharField(required=False, label="Text", max_length=MAX_QUERY_LENGTH,
                        widget=forms.TextInput(attrs={"type": "search", "placeholder": "Prompt, answer or run id"}))
    sort = forms.ChoiceField(required=False, label="Sort by", choices=SORT_CHOICES)
    replays = forms.ChoiceField(required=False, label="Show", choices=[("", "Runs"), ("only", "Replays")])

    def __init__(self, *args, agents: list[tuple[str, str]], requesters: list[tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "Any agent"), *agents]
        self.fields["requester"].choices = [("", "Anyone"), *requesters]

    def clean_session(self) -> int | None:
        raw = self.cleaned_data.get("session") or ""
        if not raw:
            return None
        session_id = id_from_text(raw)
        if session_id is None:
            raise forms.ValidationError("A session id: ASCII digits (0-9).")
        return session_id

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "The end day is before the start day.")
        return data

    def filters(self) -> ExecutionFilters:
        """The valid form as the selector's filters (days as ``common.days.day_window``)."""
        data = self.cleaned_data
        since, until = day_window(since=data.get("since"), until=data.get("until"))
        return ExecutionFilters(
            status=data.get("status") or None,
            agent_id=uuid.UUID(data["agent"]) if data.get("agent") else None,
            trigger_type=data.get("trigger_type") or None,
            since=since,
            until=until,
            session_id=data.get("session"),
            outcomes=(data["outcome"],) if data.get("outcome") else None,
            requester_id=int(data["requester"]) if data.get("requester") else None,
            text=data.get("q", "").strip() or None,
        )

    def sort_key(self) -> str:
        return self.cleaned_data.get("sort") or EXECUTION_SORT_DEFAULT


@page_login_required
@require_GET
def runs_list(request):
    workspace = current_workspace(request)
    agents = agent_choices(workspace=workspace) if workspace is not None else []
    requesters = requester_choices(workspace=workspace) if workspace is not None else []
    form = RunFilters(request.GET or None, agents=agents, requesters=requesters)
    status_code = 200
    filters = ExecutionFilters()
    sort = EXECUTION_SORT_DEFAULT
    showing_replays = False
    if form.is_bound:
        if form.is_valid():
            filters = form.filters()
            sort = form.sort_key()
            showing_replays = form.cleaned_data.get("replays") == "only"
        else:
            status_code = 400
            mark_invalid_fields(form)
    page = None
    if workspace is not None and status_code == 200:
        if showing_replays:
            rows = execution_replays_filter(workspace=workspace, filters=filters)
        else:
            rows = execution_list_rows(executions_filter(user=request.user, workspace=workspace, filters=filters),
                                       sort=sort)
        page = Paginator(rows, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "runs/list.html", {
        "workspace": workspace, "form": form, "page": page, "query": query_without_page(request),
        "showing_replays": showing_replays, "filtered": filters.any, "sort": sort,
        "columns": _sort_links(request, sort),
    }, status=status_code)


def _sort_links(request, sort: str) -> list[dict]:
    """Each sortable column's header: its label, the URL that sorts by it (ascending, or
    descending when it is already ascending), the page's other filters kept, and its
    ``aria-sort``."""
    kept = [(key, value) for key, values in request.GET.lists() if key not in {"page", "sort"}
            for value in values if value]
    columns = []
    for key, label in SORT_COLUMNS.items():
        current = "ascending" if sort == key else "descending" if sort == f"-{key}" else None
        wanted = f"-{key}" if current == "ascending" else key
        columns.append({"key": key, "label": label, "aria_sort": current,
                        "url": "?" + urlencode([*kept, ("sort", wanted)])})
    return columns


@page_login_required
@require_GET
def run_row(request, execution_id):
    """One row of the list, re-rendered when the run's status changes (static/runs.js)."""
    try:
        execution = execution_get_for_user(user=request.user, execution_id=execution_id)
    except NotFound as exc:
        raise Http404(exc.message) from None
    return render(request, "runs/_row.html", {"run": execution})


urlpatterns = [
    path("runs/", runs_list, name="runs-list"),
    path("runs/<int:execution_id>/row", run_row, name="run-row"),
]

"""The runs list (/runs/) of the current workspace and its live row fragment.

The page shows the workspace the user chose in the frame (``riverapp.context``), newest
run first, 25 to a page, with a fixed number of queries whatever the number of runs:
the frame's, the agents for the filter, the page's count and its rows (agents joined).
Replays are not runs (docs/replay.md); ``replays=only`` lists the workspace's replays
instead.
"""

from __future__ import annotations

import datetime as dt

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import render
from django.urls import path, reverse_lazy
from django.utils import timezone
from django.views.decorators.http import require_GET

from agents.models import Agent
from executions.models import Execution, ExecutionReplay
from executions.selectors import execution_get_for_user, executions_with_active_time
from riverapp.context import current_workspace
from rivercore.contracts import TriggerType
from rivercore.errors import NotFound

LOGIN_URL = reverse_lazy("login")
RUNS_PER_PAGE = 25
# The columns a row shows; nothing else is read from the table.
ROW_FIELDS = ("pk", "status", "trigger_type", "trigger_source", "trigger_id", "input_prompt", "queued_at",
              "started_at", "finished_at", "turn_count", "tokens_input", "tokens_output", "cost_usd", "cost_unknown",
              "parent_execution_id", "agent_id", "agent__name", "workspace_id")


class RunFilters(forms.Form):
    """The list's GET filters; the overview links to them by these names."""

    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *Execution.Status.choices])
    agent = forms.ChoiceField(required=False)
    trigger_type = forms.ChoiceField(required=False, label="Trigger",
                                     choices=[("", "Any trigger")] + [(t.value, t.value.title()) for t in TriggerType])
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}),
                            help_text="Runs queued on or after this day.")
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}),
                            help_text="Runs queued on or before this day.")
    replays = forms.ChoiceField(required=False, label="Show", choices=[("", "Runs"), ("only", "Replays")])

    def __init__(self, *args, agents: list[tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "Any agent"), *agents]

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "The end day is before the start day.")
        return data


def _day_start(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


def _filtered_runs(workspace, data: dict):
    runs = Execution.objects.filter(workspace=workspace)
    if data.get("status"):
        runs = runs.filter(status=data["status"])
    if data.get("agent"):
        runs = runs.filter(agent_id=data["agent"])
    if data.get("trigger_type"):
        runs = runs.filter(trigger_type=data["trigger_type"])
    if data.get("since"):
        runs = runs.filter(queued_at__gte=_day_start(data["since"]))
    if data.get("until"):
        runs = runs.filter(queued_at__lt=_day_start(data["until"] + dt.timedelta(days=1)))
    return executions_with_active_time(
        runs.select_related("agent").only(*[f for f in ROW_FIELDS if f != "agent__name"], "agent__name"))


def _filtered_replays(workspace, data: dict):
    replays = ExecutionReplay.objects.filter(workspace=workspace)
    if data.get("agent"):
        replays = replays.filter(agent_id=data["agent"])
    if data.get("since"):
        replays = replays.filter(created_at__gte=_day_start(data["since"]))
    if data.get("until"):
        replays = replays.filter(created_at__lt=_day_start(data["until"] + dt.timedelta(days=1)))
    return replays.select_related("agent").only(
        "pk", "kind", "replay_of_id", "agent_version", "summary", "created_at", "agent_id", "agent__name")


@login_required(login_url=LOGIN_URL)
@require_GET
def runs_list(request):
    workspace = current_workspace(request)
    agents = []
    if workspace is not None:
        agents = [(str(pk), name) for pk, name in
                  Agent.objects.filter(workspace=workspace).order_by("name").values_list("pk", "name")]
    form = RunFilters(request.GET or None, agents=agents)
    status_code = 200
    data: dict = {}
    if form.is_bound:
        if form.is_valid():
            data = form.cleaned_data
        else:
            status_code = 400
            for name in form.errors:
                if name in form.fields:
                    form.fields[name].widget.attrs.update(
                        {"aria-invalid": "true", "aria-describedby": f"{form[name].id_for_label}-error"})
    showing_replays = data.get("replays") == "only"
    page = None
    if workspace is not None and status_code == 200:
        rows = _filtered_replays(workspace, data) if showing_replays else _filtered_runs(workspace, data)
        page = Paginator(rows.order_by("-pk"), RUNS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "runs/list.html", {
        "workspace": workspace, "form": form, "page": page, "query": query.urlencode(),
        "showing_replays": showing_replays, "filtered": any(data.get(name) for name in
                                                            ("status", "agent", "trigger_type", "since", "until")),
    }, status=status_code)


@login_required(login_url=LOGIN_URL)
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

"""The canary panel of an agent's page (docs/changing-safely.md): the running canary's
figures beside the deployed version's, refreshed every few seconds by htmx while it
runs, and the controls to start, stop and promote one.

Reads go through ``executions.canary`` (the same functions as the API), writes through
``agents.canary``; the agent through ``agent_get_with_permissions`` (404 outside the
user's workspaces), writes need ``agent:create`` as a deploy does.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST

from agents.canary import MIN_RUNS_MAX, agent_canary_promote, agent_canary_start, agent_canary_stop
from agents.models import Agent, AgentCanary
from agents.selectors import agent_get_with_permissions, agent_version_get, agent_version_numbers
from executions.canary import CanaryComparison, canary_compare, canary_latest
from rivercore.errors import RiverError
from tenancy.permissions import AGENT_CREATE
from web.page_tools import or_404, page_login_required, require

POLL_SECONDS = 5


class CanaryStartForm(forms.Form):
    version = forms.TypedChoiceField(coerce=int, label="Version to try")
    percent = forms.IntegerField(
        min_value=AgentCanary.PERCENT_MIN,
        max_value=AgentCanary.PERCENT_MAX,
        initial=10,
        label="Share of new runs (%)",
        help_text="From 1 to 50.",
    )
    margin = forms.IntegerField(
        min_value=0,
        max_value=100,
        label="Margin (points)",
        help_text="How much worse it may do before River rolls it back.",
    )
    min_runs = forms.IntegerField(
        min_value=1,
        max_value=MIN_RUNS_MAX,
        label="Runs before judging",
        help_text="Finished runs each side needs first.",
    )

    def __init__(self, *args, numbers: list[int], current: int | None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [(n, f"v{n}") for n in numbers if n != current]
        self.fields["margin"].initial = round(settings.RIVER_CANARY_MARGIN * 100)
        self.fields["min_runs"].initial = settings.RIVER_CANARY_MIN_RUNS


def _rate(figure) -> str:
    return "—" if figure.rate is None else f"{figure.rate * 100:.1f}% ({figure.count} of {figure.of})"


def _mean(figure, unit: str) -> str:
    if figure.mean is None:
        return "—"
    value = f"${figure.mean:.4f}" if unit == "usd" else f"{figure.mean:.1f}"
    return f"{value} (over {figure.of})"


def figure_rows(comparison: CanaryComparison) -> list[dict]:
    """The panel's table: one row per figure, each side as text with its counts, and
    whether it was compared and found worse."""
    checks = {check.metric: check for check in comparison.checks}
    a, b = comparison.canary, comparison.current
    rows = [
        {"label": "Runs started", "canary": str(a.runs), "current": str(b.runs), "check": None},
        {"label": "Finished", "canary": str(a.finished), "current": str(b.finished), "check": None},
    ]
    for name, label in (
        ("answered", "Answered"),
        ("failed", "Failed"),
        ("no_answer", "No answer"),
        ("rejected", "Approvals rejected"),
        ("edited", "Approvals edited"),
    ):
        rows.append(
            {
                "label": label,
                "canary": _rate(getattr(a, name)),
                "current": _rate(getattr(b, name)),
                "check": checks.get(f"{name}_rate"),
            }
        )
    for name, label, unit in (("cost_usd", "Cost per run", "usd"), ("turns", "Turns per run", "turns")):
        rows.append(
            {
                "label": label,
                "canary": _mean(getattr(a, name), unit),
                "current": _mean(getattr(b, name), unit),
                "check": checks.get(f"mean_{name}"),
            }
        )
    for row in rows:
        check = row["check"]
        row["pending"] = (
            ""
            if check is None or check.compared
            else (
                f"not compared: zero on v{comparison.current.version}"
                if _enough(comparison, check.metric)
                else "not compared yet"
            )
        )
    return rows


def _enough(comparison: CanaryComparison, metric: str) -> bool:
    """Whether both sides have ``min_runs`` behind ``metric`` (so a figure not compared
    lacks a value, not runs)."""
    if metric in ("rejected_rate", "edited_rate"):
        counts = (comparison.canary.approvals_decided, comparison.current.approvals_decided)
    else:
        counts = (comparison.canary.finished, comparison.current.finished)
    return min(counts) >= comparison.min_runs


def canary_panel_context(*, agent: Agent, granted: frozenset[str], form: CanaryStartForm | None = None) -> dict:
    """What ``agents/_canary.html`` shows: the latest canary with its figures (live for a
    running one, as they stood at its end otherwise) and, with none running, the start
    form for those who may."""
    canary = canary_latest(agent=agent)
    comparison = None
    if canary is not None:
        comparison = (
            canary_compare(canary=canary)
            if canary.is_running or not canary.figures
            else CanaryComparison.model_validate(canary.figures)
        )
    may_manage = AGENT_CREATE in granted
    running = canary is not None and canary.is_running
    if form is None and may_manage and not running and agent.status != Agent.Status.ARCHIVED:
        current = agent.current_version.version if agent.current_version_id else None
        form = CanaryStartForm(numbers=agent_version_numbers(agent=agent), current=current)
    return {
        "agent": agent,
        "canary": canary,
        "comparison": comparison,
        "running": running,
        "rows": figure_rows(comparison) if comparison else [],
        "may_manage": may_manage,
        "canary_form": form if form is not None and form.fields["version"].choices else None,
        "poll_seconds": POLL_SECONDS,
    }


def _agent(request, agent_id):
    return or_404(agent_get_with_permissions, user=request.user, agent_id=agent_id)


@require_GET
@page_login_required
def canary_panel(request, agent_id):
    """The panel alone: what htmx swaps in every few seconds while a canary runs."""
    agent, granted = _agent(request, agent_id)
    return render(request, "agents/_canary.html", canary_panel_context(agent=agent, granted=granted))


def _back(agent) -> object:
    return redirect(reverse("agent-page", kwargs={"agent_id": agent.pk}) + "#canary-title")


@require_POST
@page_login_required
def canary_start(request, agent_id):
    agent, granted = _agent(request, agent_id)
    require(granted, AGENT_CREATE)
    current = agent.current_version.version if agent.current_version_id else None
    form = CanaryStartForm(request.POST, numbers=agent_version_numbers(agent=agent), current=current)
    if not form.is_valid():
        problems = "; ".join(
            f"{form.fields[name].label if name in form.fields else name}: {' '.join(errors)}"
            for name, errors in form.errors.items()
        )
        messages.error(request, f"No canary was started. {problems}")
        return _back(agent)
    version = or_404(agent_version_get, agent=agent, version=form.cleaned_data["version"])
    try:
        agent_canary_start(
            agent=agent,
            version=version,
            actor=request.user,
            percent=form.cleaned_data["percent"],
            margin=form.cleaned_data["margin"] / 100,
            min_runs=form.cleaned_data["min_runs"],
        )
    except RiverError as exc:
        messages.error(request, f"No canary was started: {exc.message}")
    else:
        messages.success(request, f"Version {version.version} now takes {form.cleaned_data['percent']}% of new runs.")
    return _back(agent)


def _running(request, agent_id):
    agent, granted = _agent(request, agent_id)
    require(granted, AGENT_CREATE)
    canary = canary_latest(agent=agent)
    return agent, (canary if canary is not None and canary.is_running else None)


@require_POST
@page_login_required
def canary_stop(request, agent_id):
    agent, canary = _running(request, agent_id)
    if canary is None:
        messages.error(request, "No canary is running.")
        return _back(agent)
    figures = canary_compare(canary=canary).model_dump(mode="json") | {"status": AgentCanary.Status.STOPPED}
    try:
        agent_canary_stop(canary=canary, actor=request.user, figures=figures)
    except RiverError as exc:
        messages.error(request, f"The canary was not stopped: {exc.message}")
    else:
        messages.success(
            request,
            f"The canary of version {canary.version.version} is stopped: new runs all use "
            f"version {canary.base_version.version}.",
        )
    return _back(agent)


@require_POST
@page_login_required
def canary_promote(request, agent_id):
    agent, canary = _running(request, agent_id)
    if canary is None:
        messages.error(request, "No canary is running.")
        return _back(agent)
    figures = canary_compare(canary=canary).model_dump(mode="json") | {"status": AgentCanary.Status.PROMOTED}
    try:
        agent_canary_promote(canary=canary, actor=request.user, figures=figures)
    except RiverError as exc:
        messages.error(request, f"Version {canary.version.version} was not promoted: {exc.message}")
    else:
        messages.success(request, f"Version {canary.version.version} is deployed: every new run uses it.")
    return _back(agent)


urlpatterns = [
    path("agents/<str:agent_id>/canary/panel", canary_panel, name="agent-canary-panel"),
    path("agents/<str:agent_id>/canary/start", canary_start, name="agent-canary-start"),
    path("agents/<str:agent_id>/canary/stop", canary_stop, name="agent-canary-stop"),
    path("agents/<str:agent_id>/canary/promote", canary_promote, name="agent-canary-promote"),
]

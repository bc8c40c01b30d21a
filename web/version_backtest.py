"""The Backtest panel of an agent version's auto-approve conditions (the New version
page; docs/changing-safely.md): the conditions as typed, tried against the decisions
people made on this agent's requests, before the version is saved.

The rows are read by the page's own formset; the check and the row are
``governance.backtests.auto_approve_backtest_create``'s (the API's), the work is the
worker's (``governance.backtests.backtest_queue``); the panel polls until it is done."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as PageForbidden
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from agents.selectors import agent_get_with_permissions
from governance.backtests import (
    DEFAULT_DAYS,
    MAX_DAYS,
    auto_approve_backtest_create,
    backtest_get_for_user,
    backtest_queue,
)
from rivercore.errors import PermissionDenied, RiverError
from rivercore.types.agents import TOOL_NAMES
from tenancy.permissions import AGENT_CREATE
from web.agents import AUTO_APPROVE_PREFIX, AutoApproveFormSet
from web.page_tools import or_404, page_login_required, require


def _share(auto: int, total: int, people: str) -> str:
    return f"{auto} of the {total} call{'' if total == 1 else 's'} people {people}"


def auto_approve_sentence(result: dict) -> str:
    """"Would have auto-approved 31 of the 40 calls people approved; 0 of the 5 they rejected"."""
    parts = [_share(result.get("approved_auto", 0), result.get("approved", 0), "approved")]
    if result.get("edited"):
        parts.append(f"{result.get('edited_auto', 0)} of the {result['edited']} they edited")
    parts.append(f"{result.get('rejected_auto', 0)} of the {result.get('rejected', 0)} they rejected")
    return "Would have auto-approved " + "; ".join(parts) + "."


def _panel(request, agent, *, backtest=None, error: str = "", errors=None):
    result = backtest.result if backtest is not None and backtest.status == backtest.Status.DONE else {}
    return render(request, "agents/_auto_approve_backtest.html", {
        "agent": agent, "backtest": backtest, "result": result, "error": error, "errors": errors or {},
        "sentence": auto_approve_sentence(result) if result else "",
    })


@page_login_required
@require_POST
def version_backtest_start(request, agent_id):
    agent, granted = or_404(agent_get_with_permissions, user=request.user, agent_id=agent_id)
    require(granted, AGENT_CREATE)
    formset = AutoApproveFormSet(request.POST, prefix=AUTO_APPROVE_PREFIX)
    if not formset.is_valid():
        return _panel(request, agent, error="Correct the auto-approve conditions first; nothing was tried.")
    rules = [row.rule for row in formset.forms if row.rule is not None]
    if not rules:
        return _panel(request, agent, error="Add an auto-approve condition to try.")
    days = request.POST.get("backtest_days") or str(DEFAULT_DAYS)
    if not days.isdigit() or not 1 <= int(days) <= MAX_DAYS:
        return _panel(request, agent, error=f"Days must be a whole number from 1 to {MAX_DAYS}.")
    tools = [name for name in request.POST.getlist("tools") if name in TOOL_NAMES]
    try:
        backtest = auto_approve_backtest_create(actor=request.user, workspace=agent.workspace, agent_id=agent.pk,
                                                agent_version=None, tools=tools, conditions=rules, days=int(days))
    except PermissionDenied as exc:
        raise PageForbidden(exc.message) from None
    except RiverError as exc:
        details = exc.details if isinstance(exc.details, dict) else {}
        return _panel(request, agent, error=exc.message, errors=details)
    backtest_queue(backtest=backtest)
    return _panel(request, agent, backtest=backtest)


@page_login_required
@require_GET
def version_backtest_panel(request, agent_id, backtest_id: int):
    agent, _ = or_404(agent_get_with_permissions, user=request.user, agent_id=agent_id)
    try:
        backtest = or_404(backtest_get_for_user, user=request.user, backtest_id=backtest_id)
    except PermissionDenied as exc:
        raise PageForbidden(exc.message) from None
    if backtest.agent_id != agent.pk:
        return _panel(request, agent, error="This backtest belongs to another agent.")
    return _panel(request, agent, backtest=backtest)


urlpatterns = [
    path("agents/<str:agent_id>/versions/backtest", version_backtest_start, name="agent-version-backtest-start"),
    path("agents/<str:agent_id>/versions/backtest/<int:backtest_id>", version_backtest_panel,
         name="agent-version-backtest-panel"),
]

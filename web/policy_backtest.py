"""The Backtest panel of the policy form (docs/changing-safely.md "Backtest a policy").

*Backtest* posts the form as drafted (htmx); the policy is not saved. The draft goes
through ``governance.backtests.policy_backtest_create`` (the API's checks and
authority) and ``governance.backtests.backtest_queue``; the panel then polls the row
every second until the worker has finished, and shows what the draft would have
decided over the last days of recorded runs, with the changed calls linked to their
runs. The admin then confirms with the form's own Save button.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as PageForbidden
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from governance.backtests import (
    DEFAULT_DAYS,
    MAX_DAYS,
    backtest_get_for_user,
    backtest_queue,
    policy_backtest_create,
)
from rivercore.errors import PermissionDenied, RiverError
from tenancy.permissions import POLICY_CREATE
from web.page_tools import or_404, page_login_required, require, workspace_and_permissions
from web.policies import PolicyForm


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if abs(count) == 1 else 's'}"


def backtest_sentences(result: dict) -> list[str]:
    """The result in words: what would have been blocked, and the approvers' extra load."""
    said = []
    if result.get("would_block"):
        said.append(f"Would have blocked {_plural(result['would_block'], 'call')} in "
                    f"{_plural(result.get('runs_blocked', 0), 'run')}")
    if result.get("would_unblock"):
        said.append(f"would have let through {_plural(result['would_unblock'], 'call')} blocked now")
    added = result.get("approvals_added", 0)
    per_day, minutes = result.get("approvals_added_per_day", 0), result.get("approver_minutes_per_day", 0)
    if added > 0:
        said.append(f"{per_day:g} more approvals a day ({added} over the window), about "
                    f"{minutes:g} approver-minutes a day")
    elif added < 0:
        said.append(f"{abs(per_day):g} fewer approvals a day ({abs(added)} over the window), about "
                    f"{abs(minutes):g} approver-minutes a day saved")
    if not said:
        return [f"Would not have changed any of the {_plural(result.get('calls_considered', 0), 'tool call')} "
                f"in {_plural(result.get('runs_considered', 0), 'run')}."]
    text = "; ".join(said)
    return [text[0].upper() + text[1:] + "."]


def _panel(request, backtest, *, status: int = 200):
    result = backtest.result if backtest.status == backtest.Status.DONE else {}
    return render(request, "policies/_backtest.html", {
        "backtest": backtest, "result": result, "sentences": backtest_sentences(result) if result else [],
    }, status=status)


def _form_error(request, message: str, errors: dict | None = None):
    return render(request, "policies/_backtest.html", {"error": message, "errors": errors or {}})


@page_login_required
@require_POST
def policy_backtest_start(request):
    """Start a backtest of the drafted form (``policy`` names the policy being edited)."""
    workspace, granted = workspace_and_permissions(request)
    if workspace is None:
        return _form_error(request, "Choose a workspace first.")
    require(granted, POLICY_CREATE)
    form = PolicyForm(request.POST)
    days = request.POST.get("backtest_days") or str(DEFAULT_DAYS)
    if not days.isdigit() or not 1 <= int(days) <= MAX_DAYS:
        return _form_error(request, f"Days must be a whole number from 1 to {MAX_DAYS}.")
    if not form.is_valid():
        errors = {field: [str(e) for e in messages] for field, messages in form.errors.items()}
        return _form_error(request, "Fix the form first; nothing was tried.", errors)
    data = form.cleaned_data
    fields = {"name": data["name"], "conditions": {"expression": data["expression"]},
              "policy_type": data["policy_type"] or None, "enforcement": data["enforcement"],
              "enabled": data["enabled"]}
    policy_id = request.POST.get("policy") or None
    try:
        if policy_id:
            backtest = policy_backtest_create(actor=request.user, days=int(days), workspace_id=workspace.pk,
                                              policy_id=policy_id, changes=fields)
        else:
            backtest = policy_backtest_create(actor=request.user, days=int(days), workspace_id=workspace.pk,
                                              policy={**fields, "scope": "workspace"})
    except PermissionDenied as exc:
        raise PageForbidden(exc.message) from None
    except RiverError as exc:
        details = exc.details if isinstance(exc.details, dict) else {}
        errors = {key: value for key, value in details.items() if key not in ("position", "reason")}
        return _form_error(request, exc.message, errors)
    backtest_queue(backtest=backtest)
    return _panel(request, backtest)


@page_login_required
@require_GET
def policy_backtest_panel(request, backtest_id: int):
    """The panel of one backtest: progress while it runs (polled), then its result."""
    try:
        backtest = or_404(backtest_get_for_user, user=request.user, backtest_id=backtest_id)
    except PermissionDenied as exc:
        raise PageForbidden(exc.message) from None
    return _panel(request, backtest)


urlpatterns = [
    path("policy-backtests/", policy_backtest_start, name="policy-backtest-start"),
    path("policy-backtests/<int:backtest_id>", policy_backtest_panel, name="policy-backtest-panel"),
]

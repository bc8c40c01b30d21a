"""Pages of runs: a minimal run page with its steps and its approval cards.

Session auth, login required; the run is looked up through a tenant-scoped selector.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.urls import path, reverse_lazy
from django.views.decorators.http import require_GET

from executions.selectors import execution_children, execution_get_for_user
from governance.approvals import approvals_for_user
from governance.views import approval_card
from rivercore.errors import NotFound

LOGIN_URL = reverse_lazy("login")


@login_required(login_url=LOGIN_URL)
@require_GET
def run_page(request, execution_id):
    try:
        execution = execution_get_for_user(user=request.user, execution_id=execution_id)
    except NotFound as exc:
        raise Http404(exc.message) from None
    approvals = approvals_for_user(user=request.user).filter(execution_id=execution.pk).order_by("created_at")
    return render(request, "executions/run.html", {
        "execution": execution,
        "steps": execution.steps.order_by("step_number"),
        "children": execution_children(execution=execution).select_related("agent").only(
            "pk", "status", "parent_call_id", "agent__name"),
        "cards": [approval_card(user=request.user, approval=approval) for approval in approvals],
    })


urlpatterns = [
    path("runs/<int:execution_id>/", run_page, name="run-page"),
]

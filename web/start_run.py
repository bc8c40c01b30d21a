"""Start a run: choose an active agent of the current workspace and type the request.

The overview's "Start a run" opens this form in a dialog (static/start_run.js fetches
it with ``X-River-Dialog``, posts it back and follows the answer); without JavaScript
``/runs/start`` is a page of its own with the same form. Either way the run is started
as ``POST /api/v1/agents/{id}/run`` starts it: the agent through the tenant-scoped
``agent_get_with_permissions`` (another workspace's agent is not a choice, and would
be a 404), ``agent:execute`` checked on the server, then ``execution_start`` with the
person as requester (its checks: the agent is active and has a deployed version).
"""

from __future__ import annotations

from django import forms
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods

from agents.models import Agent
from agents.selectors import agent_get_with_permissions, agents_filter
from executions.services import execution_start, person_run_request
from rivercore import limits
from rivercore.errors import InvalidInput, RiverError
from tenancy.permissions import AGENT_EXECUTE
from web.page_tools import errors_onto_form, or_404, page_login_required, require, workspace_and_permissions

DIALOG_HEADER = "X-River-Dialog"
# Where ``execution_start``'s error details land on the form.
FIELD_MAP = {"agent": "agent", "prompt": "prompt", "input_prompt": "prompt", "payload": "prompt"}


class StartRunForm(forms.Form):
    agent = forms.ChoiceField(label="Agent", help_text="Active agents of this workspace.")
    prompt = forms.CharField(max_length=limits.PROMPT, label="Request", strip=True,
                             widget=forms.Textarea(attrs={"rows": 4}),
                             help_text="What the agent should do, in your words.")

    def __init__(self, *args, agents=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "— choose an agent —"), *((str(a.pk), a.name) for a in agents)]


def _wants_fragment(request) -> bool:
    return request.headers.get(DIALOG_HEADER) == "1"


def _render(request, form, workspace, may_run, status=200):
    template = "runs/_start_form.html" if _wants_fragment(request) else "runs/start.html"
    return render(request, template, {"form": form, "workspace": workspace, "may_run": may_run}, status=status)


def _started(request, execution_id: int):
    url = reverse("run-page", kwargs={"execution_id": execution_id})
    if _wants_fragment(request):
        return JsonResponse({"url": url}, status=201)
    return redirect(url)


@page_login_required
@require_http_methods(["GET", "POST"])
def run_start(request):
    workspace, granted = workspace_and_permissions(request)
    if workspace is None:
        raise Http404("Choose a workspace first.")
    may_run = AGENT_EXECUTE in granted
    if request.method == "POST":
        require(granted, AGENT_EXECUTE)
    agents = agents_filter(user=request.user, workspace_id=workspace.pk, status=Agent.Status.ACTIVE) if may_run else []
    form = StartRunForm(request.POST or None, agents=agents)
    if request.method != "POST":
        return _render(request, form, workspace, may_run)
    if form.is_valid():
        agent, agent_granted = or_404(agent_get_with_permissions, user=request.user,
                                      agent_id=form.cleaned_data["agent"])
        require(agent_granted, AGENT_EXECUTE)
        try:
            execution = execution_start(agent=agent, request=person_run_request(
                agent=agent, user=request.user, prompt=form.cleaned_data["prompt"]))
        except InvalidInput as exc:
            errors_onto_form(form, exc, FIELD_MAP)
        except RiverError as exc:
            form.add_error(None, exc.message)
        else:
            return _started(request, execution.pk)
    return _render(request, form, workspace, may_run, status=400)


urlpatterns = [
    path("runs/start", run_start, name="run-start"),
]

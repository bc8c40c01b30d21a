"""The agent's page: run it now, its triggers with their latest firings, its latest runs.

A page, not an API: it lives here because it shows triggers and runs together, and
``triggers`` is the app that may read both (above executions and agents)."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import path, reverse_lazy

from agents.selectors import agent_get_with_permissions
from executions.models import Execution
from executions.services import execution_start
from executions.services.replay import replay_batch_latest
from rivercore import limits
from rivercore.errors import InvalidInput, NotFound
from tenancy.permissions import AGENT_CREATE, AGENT_EXECUTE
from triggers.selectors import trigger_firings_recent, triggers_for_user
from triggers.services import PAYLOAD_MAX_BYTES, trigger_fire
from triggers.types import TriggerType
from triggers.webhooks import json_strict_parse

RECENT_RUNS = 20
RECENT_FIRINGS = 5


class RunNowForm(forms.Form):
    preset = forms.ChoiceField(required=False, label="Manual trigger",
                               help_text="Optional: run with one of the agent's manual triggers (its prompt, "
                                         "filled from the payload).")
    prompt = forms.CharField(required=False, max_length=limits.PROMPT, widget=forms.Textarea(attrs={"rows": 3}),
                             help_text="What the agent should do this time.")
    payload = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}),
                              help_text='Optional JSON, for example {"ticket_id": 42}.')

    def __init__(self, *args, manual_triggers=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.manual_triggers = {str(t.pk): t for t in manual_triggers}
        self.fields["preset"].choices = [("", "— none: type a prompt —")] + [
            (key, trigger.name) for key, trigger in self.manual_triggers.items()]

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("preset") and cleaned.get("prompt"):
            self.add_error("prompt", "Leave the prompt empty when you pick a manual trigger: it brings its own.")
        return cleaned

    def clean_payload(self):
        text = (self.cleaned_data.get("payload") or "").strip()
        if not text:
            return None
        if len(text.encode()) > PAYLOAD_MAX_BYTES:
            raise forms.ValidationError(f"At most {PAYLOAD_MAX_BYTES} bytes of JSON.")
        try:
            value = json_strict_parse(text.encode())
        except InvalidInput as exc:
            problem = "; ".join(f"{where}: {', '.join(msgs)}" for where, msgs in exc.details.items()
                                if where != "body") or exc.message
            raise forms.ValidationError(f"This is not valid JSON ({problem}).") from None
        if not isinstance(value, dict):
            raise forms.ValidationError('The payload must be a JSON object, for example {"ticket_id": 42}.')
        return value


@login_required(login_url=reverse_lazy("login"))
def agent_page(request, agent_id):
    try:
        agent, granted = agent_get_with_permissions(user=request.user, agent_id=agent_id)
    except NotFound as exc:
        raise Http404(exc.message) from None
    may_run = AGENT_EXECUTE in granted
    manual = triggers_for_user(user=request.user, agent_id=agent.pk).filter(type=TriggerType.MANUAL, enabled=True)
    form = RunNowForm(request.POST or None, manual_triggers=manual.order_by("name"))
    status = 200
    if request.method == "POST":
        if not may_run:
            return render(request, "agents/detail.html", _context(request, agent, form, granted), status=403)
        if form.is_valid():
            preset = form.manual_triggers.get(form.cleaned_data["preset"])
            if preset is not None:
                firing = trigger_fire(trigger=preset, payload=form.cleaned_data["payload"], source="ui",
                                      user=request.user)
                if firing.execution_id:
                    return redirect(f"/runs/{firing.execution_id}/")
                form.add_error(None, f"Nothing started: {firing.get_reason_display()}. {firing.detail}")
            else:
                try:
                    execution = execution_start(agent=agent, user=request.user,
                                                input_prompt=form.cleaned_data["prompt"],
                                                payload=form.cleaned_data["payload"], trigger_type="manual",
                                                trigger_source="ui")
                except InvalidInput as exc:
                    form.add_error(None, exc.message)
                else:
                    return redirect(f"/runs/{execution.pk}/")
        status = 400
    return render(request, "agents/detail.html", _context(request, agent, form, granted), status=status)


def _context(request, agent, form, granted) -> dict:
    triggers = list(triggers_for_user(user=request.user, agent_id=agent.pk).order_by("name"))
    recent = trigger_firings_recent(trigger_ids=[t.pk for t in triggers], limit=RECENT_FIRINGS)
    return {
        "agent": agent,
        "form": form,
        "may_run": AGENT_EXECUTE in granted,
        "may_manage": AGENT_CREATE in granted,
        "triggers": [{"trigger": t, "firings": recent.get(t.pk, [])} for t in triggers],
        "replay_batch": replay_batch_latest(agent_id=agent.pk),
        "runs": Execution.objects.filter(agent=agent).select_related("requested_by").order_by("-queued_at",
                                                                                             "-id")[:RECENT_RUNS],
    }


urlpatterns = [
    path("agents/<str:agent_id>/", agent_page, name="agent-page"),
]

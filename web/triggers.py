"""Pages of triggers: the list (every type, with its latest firing), a form per type,
a trigger's page with its firings (paginated, with the reason a firing started
nothing), editing it (what the API's PATCH may change, through the same service),
enabling or disabling it, deleting it, and rotating its webhook endpoint's signing
secret. A schedule shows its next run times in its own time zone, on its page and,
as the cron and zone are typed, on its forms (``triggers/schedule-preview``).

A webhook's signing secret and an API key are shown once, on the page that answers the
form that created (or rotated) them, and never again (River keeps the secret encrypted and only a
digest of the key). That page is not cached.
"""

from __future__ import annotations

import json
import zoneinfo
from datetime import timedelta
from functools import lru_cache

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.formats import date_format
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.selectors import agent_choices, agent_in_workspace
from rivercore.errors import RiverError
from rivercore.outcome import Outcome
from tenancy.permissions import AGENT_CREATE, ROLE_ORDER
from tenancy.selectors import workspace_permissions
from triggers import apikeys, webhooks
from triggers.models import TriggerFiring, WebhookScheme
from triggers.schedule import schedule_slots_next
from triggers.selectors import (
    trigger_firings,
    trigger_get_for_user,
    triggers_filter,
    triggers_with_last_firing,
    webhook_endpoint_in_workspace,
    webhook_endpoint_slugs,
)
from triggers.services import (
    DEFAULT_RUN_AS_ROLE,
    NAME_MAX,
    schedule_config_check,
    trigger_authority_check,
    trigger_create,
    trigger_delete,
    trigger_update,
    webhook_endpoint_authority_check,
)
from triggers.types import (
    API_TYPE_NAMES,
    TERMINAL_STATUSES,
    ScheduledConfig,
    TriggerType,
    config_public,
    trigger_config_parse,
    type_from_api,
)
from web.page_tools import (
    errors_onto_form,
    mark_invalid_fields,
    or_404,
    page_login_required,
    paginate,
    query_without_page,
    require,
    workspace_and_permissions,
)
from web.templatetags.catalog import cron_words

FIRINGS_PER_PAGE = 25

# Each type as the pages name and explain it, keyed by the API's type name.
TYPE_LABELS = {
    "manual": ("Manual", "A preset people start from the agent's page (Run now)."),
    "schedule": ("Schedule", "Runs on a timetable, written as a cron expression."),
    "event": ("Webhook event", "Runs when another system posts a signed event to River."),
    "api": ("API call", "Runs when another system calls River with an API key."),
    "threshold": ("Metric threshold", "Runs when a metric you send River crosses a line."),
    "workflow": ("Pipeline", "Runs when another agent's run ends: agents in a chain."),
}
NEW_ENDPOINT = "__new__"


def _type_label(api_type: str) -> str:
    return TYPE_LABELS.get(api_type, (api_type, ""))[0]


# --- the list ---------------------------------------------------------------------------


class TriggerFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=NAME_MAX, label="Name contains")
    type = forms.ChoiceField(required=False, choices=[("", "Any type")] + [(k, v[0]) for k, v in TYPE_LABELS.items()])
    enabled = forms.ChoiceField(required=False, label="Status",
                                choices=[("", "Enabled or not"), ("yes", "Enabled"), ("no", "Disabled")])


@page_login_required
@require_GET
def triggers_list(request):
    workspace, granted = workspace_and_permissions(request)
    form = TriggerFilterForm(request.GET)
    page = None
    if not form.is_valid():
        return render(request, "triggers/list.html", {"form": form, "workspace": workspace}, status=400)
    if workspace is not None:
        data = form.cleaned_data
        rows = triggers_filter(user=request.user, workspace_id=workspace.pk, name_contains=data["q"],
                               trigger_type=type_from_api(data["type"]) if data["type"] else None,
                               enabled=(data["enabled"] == "yes") if data["enabled"] else None)
        page = paginate(request, triggers_with_last_firing(rows))
    return render(request, "triggers/list.html", {
        "form": form, "page": page, "query": query_without_page(request), "workspace": workspace,
        "may_manage": AGENT_CREATE in granted, "types": TYPE_LABELS,
    })


# --- creating ---------------------------------------------------------------------------


class TriggerForm(forms.Form):
    """The fields every type has; ``__init__`` adds the type's own."""

    name = forms.CharField(max_length=NAME_MAX, help_text="Unique in the workspace, for example Nightly refund check.")
    agent = forms.ChoiceField(help_text="The agent this trigger runs.")
    prompt = forms.CharField(required=False, max_length=20_000, widget=forms.Textarea(attrs={"rows": 3}),
                             help_text="What the agent is asked each time. {{ payload.field }} puts in a value of "
                                       "the event or call, for example Check ticket {{ payload.ticket_id }}.")
    run_as_role = forms.ChoiceField(choices=[(role, str(role).capitalize()) for role in ROLE_ORDER],
                                    initial=DEFAULT_RUN_AS_ROLE, label="Runs with the role",
                                    help_text="What its runs may do in the workspace; at most your own role.")
    enabled = forms.BooleanField(required=False, initial=True, label="Enabled")

    def __init__(self, *args, api_type: str, agents, endpoints=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.api_type = api_type
        self.fields["agent"].choices = [("", "— choose an agent —"), *agents]
        extra = getattr(self, f"_fields_{api_type}")(agents=agents, endpoints=endpoints)
        self.type_fields = list(extra)
        self.fields.update(extra)

    # -- each type's fields

    def _fields_manual(self, **_):
        return {}

    def _fields_schedule(self, **_):
        return {
            "cron": forms.CharField(max_length=200, label="When (cron)", widget=forms.TextInput(attrs={
                "hx-get": reverse("trigger-cron-words"), "hx-trigger": "input changed delay:400ms",
                "hx-target": "#cron-words", "autocomplete": "off", "spellcheck": "false"}),
                help_text="Five fields: minute hour day-of-month month day-of-week. 0 8 * * 1-5 is 08:00 on "
                          "weekdays; */15 * * * * is every 15 minutes."),
            "timezone": forms.CharField(max_length=64, initial="UTC", label="Time zone",
                                        widget=forms.TextInput(attrs={"list": "time-zones", "autocomplete": "off",
                                                                      "spellcheck": "false"}),
                                        help_text="An IANA time zone, for example Europe/Berlin or UTC."),
        }

    def _fields_event(self, *, endpoints, **_):
        return {
            "endpoint": forms.ChoiceField(label="Webhook endpoint", choices=[
                *[(slug, slug) for slug in endpoints], (NEW_ENDPOINT, "A new endpoint (named below)")],
                help_text="Where the other system posts its events."),
            "new_endpoint": forms.SlugField(required=False, max_length=80, label="New endpoint name",
                                            help_text="Lowercase letters, digits and hyphens, for example zendesk. "
                                                      "Its signing secret is shown once, after saving."),
            "new_endpoint_scheme": forms.ChoiceField(
                required=False, label="New endpoint's signatures", initial=WebhookScheme.STANDARD,
                choices=[(scheme.value, scheme.label) for scheme in webhooks.CHOOSABLE_SCHEMES],
                help_text="How the sender signs: Standard Webhooks (River makes the secret), or GitHub's or "
                          "Stripe's own format (paste the secret they show below)."),
            "new_endpoint_secret": forms.CharField(
                required=False, max_length=256, strip=False, label="GitHub or Stripe signing secret",
                widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
                help_text="Only for GitHub or Stripe: the secret you set in GitHub, or Stripe's whsec_… ."),
            "event_type": forms.CharField(max_length=100, label="Event type",
                                          help_text="The type of event to react to, for example ticket.created."),
            "condition": forms.CharField(required=False, max_length=2_000, label="Only when",
                                         help_text="A condition on the event, for example payload.priority == "
                                                   "'high'. Empty: every event of this type."),
        }

    def _fields_api(self, **_):
        return {
            "input_schema": forms.CharField(required=False, label="Payload schema (JSON Schema)",
                                            widget=forms.Textarea(attrs={"rows": 5, "data-json": "object",
                                                                         "class": "code"}),
                                            help_text="Optional: calls whose payload does not match are refused."),
            "rate_limit_per_minute": forms.IntegerField(required=False, min_value=1, label="Calls per minute, at most",
                                                        help_text="Optional; empty means only each key's own limit."),
            "issue_key": forms.BooleanField(required=False, initial=True, label="Issue an API key for this workspace",
                                            help_text="Shown once, after saving. Other systems send it in the "
                                                      "X-API-Key header."),
        }

    def _fields_threshold(self, **_):
        return {
            "expression": forms.CharField(max_length=300, label="When the metric",
                                          help_text="For example cpu_percent > 90 for 5m, or avg(latency_ms) > 500 "
                                                    "for 10m."),
            "cooldown_seconds": forms.IntegerField(min_value=0, max_value=7 * 86_400, initial=900,
                                                   label="Wait before firing again (seconds)"),
        }

    def _fields_workflow(self, *, agents, **_):
        return {
            "upstream_agent": forms.ChoiceField(label="After a run of", choices=[("", "— choose an agent —"), *agents],
                                                help_text="Another agent of this workspace."),
            "on_statuses": forms.MultipleChoiceField(
                label="When that run ends as", widget=forms.CheckboxSelectMultiple, initial=["completed"],
                choices=[(status.value, status.value.replace("_", " ").capitalize())
                         for status in sorted(TERMINAL_STATUSES)]),
            "on_outcomes": forms.MultipleChoiceField(
                required=False, label="And only when its outcome is", widget=forms.CheckboxSelectMultiple,
                choices=[(outcome.value, outcome.value.replace("_", " ").capitalize()) for outcome in Outcome],
                help_text="Optional: for example only Answered, so a blocked or rejected run stops the chain. "
                          "None ticked: any outcome."),
        }

    # -- the service's arguments

    def clean(self):
        data = super().clean()
        if self.api_type == "event" and data.get("endpoint") == NEW_ENDPOINT and not data.get("new_endpoint"):
            self.add_error("new_endpoint", "Name the new endpoint, or choose an existing one.")
        return data

    def clean_input_schema(self):
        import json

        text = (self.cleaned_data.get("input_schema") or "").strip()
        if not text:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"This is not valid JSON: {exc.msg} (line {exc.lineno}, column "
                                        f"{exc.colno}).") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("A JSON Schema is a JSON object.")
        return value

    def config(self) -> dict:
        data = self.cleaned_data
        if self.api_type == "schedule":
            return {"cron": data["cron"], "timezone": data["timezone"]}
        if self.api_type == "event":
            endpoint = data["new_endpoint"] if data["endpoint"] == NEW_ENDPOINT else data["endpoint"]
            return {"endpoint": endpoint, "event_type": data["event_type"], "condition": data["condition"]}
        if self.api_type == "api":
            return {"input_schema": data["input_schema"], "rate_limit_per_minute": data["rate_limit_per_minute"]}
        if self.api_type == "threshold":
            return {"expression": data["expression"], "cooldown_seconds": data["cooldown_seconds"]}
        if self.api_type == "workflow":
            return {"upstream_agent": data["upstream_agent"], "on_statuses": list(data["on_statuses"]),
                    "on_outcomes": list(data["on_outcomes"]) or None}
        return {}

    def field_map(self) -> dict[str, str]:
        mapping = {f"config.{name}": name for name in self.type_fields}
        if self.api_type == "event":
            mapping.update({"slug": "new_endpoint", "scheme": "new_endpoint_scheme", "secret": "new_endpoint_secret"})
        return mapping


@page_login_required
def trigger_new(request):
    workspace, granted = workspace_and_permissions(request)
    if workspace is None:
        raise Http404("You belong to no workspace.")
    require(granted, AGENT_CREATE)
    api_type = request.GET.get("type") or "manual"
    if api_type not in API_TYPE_NAMES.values():
        raise Http404("No such trigger type.")
    agents = agent_choices(workspace=workspace, include_archived=False)
    endpoints = webhook_endpoint_slugs(workspace_id=workspace.pk, limit=200)
    initial = {"agent": request.GET.get("agent", "")}
    if api_type == "event":
        initial["endpoint"] = endpoints[0] if endpoints else NEW_ENDPOINT
    form = TriggerForm(request.POST or None, api_type=api_type, agents=agents, endpoints=endpoints, initial=initial)
    context = {"form": form, "api_type": api_type, "types": TYPE_LABELS, "workspace": workspace,
               "type_label": _type_label(api_type), "type_help": TYPE_LABELS[api_type][1],
               "next_runs": None, "time_zones": _time_zone_names() if api_type == "schedule" else ()}
    if request.method != "POST":
        return render(request, "triggers/new.html", context)
    if not form.is_valid():
        return render(request, "triggers/new.html", context, status=400)
    agent = agent_in_workspace(workspace_id=workspace.pk, agent_id=form.cleaned_data["agent"])
    if agent is None:
        form.add_error("agent", "Choose an agent of this workspace.")
        return render(request, "triggers/new.html", context, status=400)
    try:
        created = _trigger_save(request, workspace, agent, form)
    except RiverError as exc:
        errors_onto_form(form, exc, form.field_map())
        return render(request, "triggers/new.html", context, status=400)
    trigger, secret, key = created
    if secret is None and key is None:
        messages.success(request, f"Trigger {trigger.name} saved.")
        return redirect("trigger-page", trigger_id=trigger.pk)
    response = render(request, "triggers/created.html", {
        "trigger": trigger, "secret": secret, "key": key,
        "hook_url": request.build_absolute_uri(f"/api/v1/hooks/{secret.endpoint.pk}") if secret else "",
        "invoke_url": request.build_absolute_uri(f"/api/v1/triggers/{trigger.pk}/invoke"),
    })
    add_never_cache_headers(response)
    return response


def _trigger_save(request, workspace, agent, form):
    """(trigger, the new endpoint's issued secret or None, the issued API key or None),
    all saved together or none."""
    data = form.cleaned_data
    secret = key = None
    with transaction.atomic():
        if form.api_type == "event" and data["endpoint"] == NEW_ENDPOINT:
            webhook_endpoint_authority_check(actor=request.user, workspace=workspace, slug=data["new_endpoint"])
            secret = webhooks.webhook_endpoint_create(
                workspace=workspace, slug=data["new_endpoint"], created_by=request.user,
                scheme=data["new_endpoint_scheme"] or WebhookScheme.STANDARD,
                secret=data["new_endpoint_secret"] or None)
        trigger = trigger_create(actor=request.user, workspace=workspace, agent=agent, name=data["name"],
                                 trigger_type=type_from_api(form.api_type), prompt=data["prompt"],
                                 config=form.config(), enabled=data["enabled"], run_as_role=data["run_as_role"])
        if form.api_type == "api" and data["issue_key"]:
            key = apikeys.api_key_issue(created_by=request.user, name=f"Key for {trigger.name}"[:100],
                                        workspace=workspace)
    return trigger, secret, key


@require_GET
@page_login_required
def cron_describe(request):
    """The cron expression typed so far, in words (an htmx fragment for the schedule form)."""
    from croniter import croniter

    expression = " ".join((request.GET.get("cron") or "").split())[:200]
    if not expression:
        text = ""
    elif len(expression.split(" ")) == 5 and croniter.is_valid(expression):
        text = cron_words(expression) + "."
    else:
        text = "Not a complete cron expression yet: five fields, for example 0 8 * * 1-5."
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


# --- editing ----------------------------------------------------------------------------

# Fields of the create form an edit does not have: a trigger keeps its agent, an edit
# re-points an event trigger only to an existing endpoint (PATCH's rule), and API keys
# are issued on their own.
CREATE_ONLY_FIELDS = ("agent", "new_endpoint", "new_endpoint_scheme", "new_endpoint_secret", "issue_key")


def _trigger_initial(trigger) -> dict:
    """The edit form's values: the trigger as the API shows it."""
    config = config_public(trigger.config)
    initial = {"name": trigger.name, "prompt": trigger.prompt, "enabled": trigger.enabled,
               "run_as_role": getattr(trigger, "run_as_role", None), **config}
    if trigger.api_type == "api":
        schema = config.get("input_schema")
        initial["input_schema"] = json.dumps(schema, indent=2) if schema is not None else ""
    if trigger.api_type == "workflow":
        initial["on_outcomes"] = config.get("on_outcomes") or []
    return initial


def _config_compared(api_type: str, config: dict):
    """A config as two of them are compared (normalised by the type's model, lists as
    sets); the raw dict when it does not parse, so it counts as a change and the service
    names what is wrong."""
    try:
        parsed = trigger_config_parse(trigger_type=type_from_api(api_type), config=config)
    except RiverError:
        return config
    return {key: sorted(map(str, value)) if isinstance(value, list) else value
            for key, value in parsed.model_dump(mode="json").items()}


class TriggerEditForm(TriggerForm):
    """The create form's fields a PATCH may change, filled with the trigger's values.
    ``changes`` is what the edit sends ``trigger_update``: only what differs, so
    unticking Enabled alone is the disable anyone who manages triggers may do."""

    def __init__(self, *args, trigger, agents, endpoints, **kwargs):
        super().__init__(*args, api_type=trigger.api_type, agents=agents, endpoints=endpoints,
                         initial=_trigger_initial(trigger), **kwargs)
        self.trigger = trigger
        for name in CREATE_ONLY_FIELDS:
            self.fields.pop(name, None)
        self.type_fields = [name for name in self.type_fields if name in self.fields]
        if "endpoint" in self.fields:
            current = self.initial.get("endpoint")
            slugs = list(endpoints) if current in endpoints or not current else [current, *endpoints]
            self.fields["endpoint"].choices = [(slug, slug) for slug in slugs]
        if "upstream_agent" in self.fields:
            self.fields["upstream_agent"].choices = [
                ("", "— choose an agent —"), *[(pk, name) for pk, name in agents if pk != str(trigger.agent_id)]]

    def changes(self) -> dict:
        data, initial = self.cleaned_data, self.initial
        changes = {}
        if data["name"] != initial["name"]:
            changes["name"] = data["name"]
        if data["prompt"] != (initial["prompt"] or "").strip():
            changes["prompt"] = data["prompt"]
        if data["run_as_role"] != initial["run_as_role"]:
            changes["run_as_role"] = data["run_as_role"]
        if bool(data["enabled"]) != initial["enabled"]:
            changes["enabled"] = bool(data["enabled"])
        config = self.config()
        if _config_compared(self.api_type, config) != _config_compared(self.api_type,
                                                                       config_public(self.trigger.config)):
            changes["config"] = config
        return changes


def _edit_context(request, trigger, form) -> dict:
    try:  # say up front when only disabling is open to this user (the service decides on save)
        trigger_authority_check(actor=request.user, trigger=trigger)
        authority_note = ""
    except RiverError as exc:
        details = exc.details if isinstance(exc.details, dict) else {}
        authority_note = " ".join([exc.message, *details.get("run_as_role", [])])
    config = config_public(trigger.config)
    return {"trigger": trigger, "form": form, "api_type": trigger.api_type, "authority_note": authority_note,
            "type_label": _type_label(trigger.api_type), "type_help": TYPE_LABELS[trigger.api_type][1],
            "next_runs": _next_runs(config) if trigger.type == TriggerType.SCHEDULED else None,
            "time_zones": _time_zone_names() if trigger.type == TriggerType.SCHEDULED else ()}


@page_login_required
@require_http_methods(["GET", "POST"])
def trigger_edit(request, trigger_id):
    """Change what ``PATCH /api/v1/triggers/{id}/`` may change, through ``trigger_update``
    (its checks, its re-binding, its audit entry). 404 outside the user's workspaces, 403
    without ``agent:create`` there (the API's rules)."""
    trigger = or_404(trigger_get_for_user, user=request.user, trigger_id=trigger_id)
    require(workspace_permissions(user=request.user, workspace=trigger.workspace), AGENT_CREATE)
    form = TriggerEditForm(request.POST if request.method == "POST" else None, trigger=trigger,
                           agents=agent_choices(workspace=trigger.workspace),
                           endpoints=webhook_endpoint_slugs(workspace_id=trigger.workspace_id, limit=200))
    if request.method != "POST":
        return render(request, "triggers/edit.html", _edit_context(request, trigger, form))
    if not form.is_valid():
        mark_invalid_fields(form)
        return render(request, "triggers/edit.html", _edit_context(request, trigger, form), status=400)
    changes = form.changes()
    if not changes:
        messages.info(request, f"Nothing changed in {trigger.name}.")
        return redirect("trigger-page", trigger_id=trigger.pk)
    try:
        trigger = trigger_update(actor=request.user, trigger=trigger, **changes)
    except RiverError as exc:
        errors_onto_form(form, exc, form.field_map())
        mark_invalid_fields(form)
        return render(request, "triggers/edit.html", _edit_context(request, trigger, form), status=exc.status_code)
    messages.success(request, f"Trigger {trigger.name} saved.")
    return redirect("trigger-page", trigger_id=trigger.pk)


# --- a schedule's next runs --------------------------------------------------------------

NEXT_RUNS = 3


def _slot_text(slot) -> str:
    """A slot in its own zone: ``Sun 8 Mar 2026, 09:00 EDT`` (``UTC+04`` for a zone
    whose abbreviation is only its offset)."""
    zone = slot.tzname() or ""
    if zone[:1] in "+-":
        zone = f"UTC{zone}"
    return f"{date_format(slot, 'D j M Y, H:i')} {zone}".strip()


def _next_runs(config) -> list[dict]:
    """The next run times of a schedule (``config`` as the API shows it), each as
    ``{"at": ISO 8601 with offset, "text": …}``; empty when no date matches."""
    try:
        parsed = ScheduledConfig.model_validate(config)
    except ValueError:
        return []
    slots = schedule_slots_next(config=parsed, now=timezone.now(), count=NEXT_RUNS)
    return [{"at": slot.isoformat(), "text": _slot_text(slot)} for slot in slots]


@lru_cache(maxsize=1)
def _time_zone_names() -> tuple[str, ...]:
    """The IANA zones the time-zone field suggests (its ``<datalist>``)."""
    return tuple(sorted(name for name in zoneinfo.available_timezones() if "/" in name or name == "UTC"))


@require_GET
@page_login_required
def schedule_preview(request):
    """The next run times of the cron expression and time zone typed so far, as JSON for
    the schedule form's script. Refused (400) with the errors a save would give
    (``triggers.services.schedule_config_check``: the API's, naming ``config.cron`` or
    ``config.timezone``)."""
    config = {key: request.GET[key][:1000] for key in ("cron", "timezone") if key in request.GET}
    try:
        parsed = schedule_config_check(config=config)
    except RiverError as exc:
        error = {"code": exc.code, "message": exc.message, "details": exc.details or {}}
        return JsonResponse({"valid": False, "error": error}, status=exc.status_code)
    return JsonResponse({"valid": True, "cron": parsed.cron, "timezone": parsed.timezone,
                         "words": cron_words(parsed.cron), "next": _next_runs(parsed.model_dump())})


# --- a trigger's page -------------------------------------------------------------------


def _endpoint_of(trigger):
    """The webhook endpoint an event trigger listens on (None for other types, or when
    the endpoint was deleted)."""
    if trigger.type != TriggerType.EVENT:
        return None
    slug = config_public(trigger.config).get("endpoint")
    return webhook_endpoint_in_workspace(workspace_id=trigger.workspace_id, slug=slug)


@page_login_required
@require_GET
def trigger_page(request, trigger_id):
    trigger = or_404(trigger_get_for_user, user=request.user, trigger_id=trigger_id)
    granted = workspace_permissions(user=request.user, workspace=trigger.workspace)
    firings = paginate(request, trigger_firings(trigger=trigger), FIRINGS_PER_PAGE)
    config = config_public(trigger.config)
    upstream = None
    if trigger.type == TriggerType.WORKFLOW:
        upstream = agent_in_workspace(workspace_id=trigger.workspace_id, agent_id=config.get("upstream_agent"))
    endpoint = _endpoint_of(trigger)
    return render(request, "triggers/detail.html", {
        "trigger": trigger, "config": config, "type_label": _type_label(trigger.api_type), "page": firings,
        "rotate_form": RotateForm(),
        "may_manage": AGENT_CREATE in granted, "upstream": upstream, "endpoint": endpoint,
        "hook_url": request.build_absolute_uri(f"/api/v1/hooks/{endpoint.pk}") if endpoint else "",
        "invoke_url": request.build_absolute_uri(f"/api/v1/triggers/{trigger.pk}/invoke"),
        "reasons": TriggerFiring.Reason,
        "next_runs": _next_runs(config) if trigger.type == TriggerType.SCHEDULED else None,
    })


@require_POST
@page_login_required
def trigger_enabled(request, trigger_id):
    trigger = or_404(trigger_get_for_user, user=request.user, trigger_id=trigger_id)
    require(workspace_permissions(user=request.user, workspace=trigger.workspace), AGENT_CREATE)
    enable = request.POST.get("enabled") == "1"
    try:
        trigger = trigger_update(actor=request.user, trigger=trigger, enabled=enable)
    except RiverError as exc:
        messages.error(request, f"Nothing changed: {exc.message}")
    else:
        messages.success(request, f"{trigger.name} is {'enabled' if trigger.enabled else 'disabled'}.")
    return redirect("trigger-page", trigger_id=trigger.pk)


@require_POST
@page_login_required
def trigger_delete_page(request, trigger_id):
    """Delete the trigger (``DELETE /api/v1/triggers/{id}/``'s rules): its firings go,
    the runs it started stay."""
    trigger = or_404(trigger_get_for_user, user=request.user, trigger_id=trigger_id)
    require(workspace_permissions(user=request.user, workspace=trigger.workspace), AGENT_CREATE)
    name = trigger.name
    trigger_delete(trigger=trigger)
    messages.success(request, f"Trigger {name} is deleted. The runs it started are still in Runs.")
    return redirect("triggers")


GRACE_CHOICES = [("0", "Stop the old secret now"), ("3600", "Keep the old secret working for 1 hour"),
                 ("86400", "Keep the old secret working for 1 day"),
                 ("604800", "Keep the old secret working for 7 days")]


class RotateForm(forms.Form):
    previous_valid_seconds = forms.TypedChoiceField(choices=GRACE_CHOICES, coerce=int, initial="86400",
                                                    label="The old secret")
    secret = forms.CharField(required=False, max_length=256, strip=False, label="The sender's new secret",
                             widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
                             help_text="GitHub and Stripe endpoints: the new secret you set in GitHub, or the "
                                       "whsec_… Stripe shows after rolling it. Never shown again.")


@require_POST
@page_login_required
def trigger_endpoint_rotate(request, trigger_id):
    """A new signing secret for the event trigger's webhook endpoint (``POST
    /api/v1/webhook-endpoints/{id}/rotate``'s rules), shown once on the answer."""
    trigger = or_404(trigger_get_for_user, user=request.user, trigger_id=trigger_id)
    require(workspace_permissions(user=request.user, workspace=trigger.workspace), AGENT_CREATE)
    endpoint = _endpoint_of(trigger)
    if endpoint is None:
        raise Http404("This trigger has no webhook endpoint.")
    try:
        webhook_endpoint_authority_check(actor=request.user, workspace=trigger.workspace, slug=endpoint.slug)
    except RiverError as exc:
        messages.error(request, f"The secret was not rotated: {exc.message}")
        return redirect("trigger-page", trigger_id=trigger.pk)
    form = RotateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The secret was not rotated: choose how long the old secret keeps working.")
        return redirect("trigger-page", trigger_id=trigger.pk)
    try:
        issued = webhooks.webhook_endpoint_rotate(
            endpoint=endpoint, previous_valid_for=timedelta(seconds=form.cleaned_data["previous_valid_seconds"]),
            secret=form.cleaned_data["secret"] or None)
    except RiverError as exc:
        reasons = "; ".join(str(reason) for reasons in (exc.details or {}).values() for reason in reasons)
        messages.error(request, f"The secret was not rotated: {reasons or exc.message}")
        return redirect("trigger-page", trigger_id=trigger.pk)
    response = render(request, "triggers/created.html", {
        "trigger": trigger, "secret": issued, "key": None, "rotated": True,
        "hook_url": request.build_absolute_uri(f"/api/v1/hooks/{endpoint.pk}"),
    })
    add_never_cache_headers(response)
    return response


urlpatterns = [
    path("triggers/", triggers_list, name="triggers"),
    path("triggers/new/", trigger_new, name="trigger-new"),
    path("triggers/cron-words", cron_describe, name="trigger-cron-words"),
    path("triggers/schedule-preview", schedule_preview, name="trigger-schedule-preview"),
    path("triggers/<str:trigger_id>/", trigger_page, name="trigger-page"),
    path("triggers/<str:trigger_id>/edit", trigger_edit, name="trigger-edit"),
    path("triggers/<str:trigger_id>/enabled", trigger_enabled, name="trigger-enabled"),
    path("triggers/<str:trigger_id>/delete", trigger_delete_page, name="trigger-delete"),
    path("triggers/<str:trigger_id>/endpoint/rotate", trigger_endpoint_rotate, name="trigger-endpoint-rotate"),
]

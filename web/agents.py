"""Pages of agents: the list, an agent's page (run it now, versions and their diff,
deploy, activate and pause, triggers with their latest firings, memory, latest runs),
a new version, and a new agent by hand or from a description.

Views parse (Django forms), authorize (the agent through ``agent_get_with_permissions``,
which 404s outside the user's workspaces; writes need ``agent:create``, running needs
``agent:execute``, as the API asks), call the agents, executions and triggers services,
and render. Writes answer with a redirect and a message (post/redirect/get).
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agents.diff import version_diff
from agents.models import Agent, AgentVersion
from agents.selectors import (
    agent_get_with_permissions,
    agent_memories_for_user,
    agent_memories_recent,
    agent_version_get,
    agent_version_numbers,
    agent_versions,
    agents_filter,
    memory_consent_given,
    memory_get_for_user,
)
from agents.services import (
    APPROVER_ROLES,
    agent_create,
    agent_transition,
    agent_version_create,
    agent_version_deploy,
    memory_consent_set,
    workspace_memory_delete,
)
from datasources.selectors import data_source_choices, data_sources_first
from executions.selectors import agent_runs_recent, agents_with_run_stats, success_rate
from executions.services import execution_start, person_run_request
from executions.services.replay import replay_batch_latest
from governance.checker import auto_approve_condition_validate
from governance.expressions import MAX_EXPRESSION_CHARS, ExpressionError
from governance.models import WorkspaceSettings
from governance.selectors import workspace_memory_mode
from governance.services import workspace_memory_mode_set
from rivercore import limits
from rivercore.contracts import AvailableDataSource, GenerateAgentRequest, UserContext
from rivercore.errors import InvalidInput, RiverError
from rivercore.types.agents import (
    MAX_ESCALATION_TIMEOUT_MINUTES,
    MAX_REQUIRED_APPROVALS,
    MAX_TOKEN_BUDGET,
    TOOL_NAMES,
    ActionLevel,
    ApprovalRules,
    BusinessFunction,
    GovernanceLevel,
    ModelConfig,
)
from tenancy.permissions import AGENT_CREATE, AGENT_EXECUTE, ORG_ADMIN_ROLE, POLICY_CREATE
from tenancy.selectors import workspace_roles
from toolservers.selectors import mcp_tools_usable_in_workspace
from triggers.selectors import trigger_firings_recent, triggers_filter
from triggers.services import PAYLOAD_MAX_BYTES, trigger_fire
from triggers.types import TriggerType
from triggers.webhooks import json_strict_parse
from web.agent_canary import canary_panel_context
from web.evaluations import agent_evaluation_context
from web.page_tools import (
    errors_onto_form,
    or_404,
    page_login_required,
    paginate,
    query_without_page,
    require,
    workspace_and_permissions,
)
from web.policies import catalog_tables, error_json

RECENT_RUNS = 20
RECENT_FIRINGS = 5
VERSIONS_SHOWN = 20
MEMORIES_SHOWN = 10
SUCCESS_WINDOW = timedelta(days=30)

# What a business user reads for each tool (the tool's name stays visible next to it).
TOOL_LABELS = {
    "classify_intent": "Understand the request",
    "search_catalog": "Find tables and columns",
    "generate_query": "Write SQL queries",
    "execute_query": "Run read-only queries",
    "explain_results": "Explain results",
    "recommend_visualization": "Suggest a chart",
    "check_governance": "Check policies",
    "ask_user": "Ask a person a question",
    "write_back": "Change records (approved first)",
    "delegate_to_agent": "Hand work to another agent",
}


def _choices(enum) -> list[tuple[str, str]]:
    return [(member.value, member.value.replace("_", " ").capitalize()) for member in enum]


def _tool_choices() -> list[tuple[str, str]]:
    return [(name, f"{TOOL_LABELS.get(name, name.replace('_', ' ').capitalize())} ({name})")
            for name in sorted(TOOL_NAMES)]


def _agent_or_404(request, agent_id) -> tuple[Agent, frozenset[str]]:
    return or_404(agent_get_with_permissions, user=request.user, agent_id=agent_id)


# --- the list ---------------------------------------------------------------------------


class AgentFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Name contains")
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *Agent.Status.choices])
    health = forms.ChoiceField(required=False, choices=[("", "Any health"), *Agent.Health.choices])


@page_login_required
def agents_list(request):
    workspace, granted = workspace_and_permissions(request)
    form = AgentFilterForm(request.GET)
    if not form.is_valid():
        return render(request, "agents/list.html", {"form": form, "page": None, "workspace": workspace}, status=400)
    page = None
    if workspace is not None:
        data = form.cleaned_data
        rows = agents_filter(user=request.user, workspace_id=workspace.pk, name_contains=data["q"],
                             status=data["status"], health=data["health"])
        rows = agents_with_run_stats(rows, since=timezone.now() - SUCCESS_WINDOW)
        page = paginate(request, rows)
        for agent in page.object_list:
            rate = success_rate(answered=agent.runs_answered, finished=agent.runs_finished)
            agent.success_rate = None if rate is None else round(100 * rate)
    return render(request, "agents/list.html", {
        "form": form, "page": page, "query": query_without_page(request), "workspace": workspace,
        "may_manage": AGENT_CREATE in granted, "window_days": SUCCESS_WINDOW.days,
    })


# --- an agent's page --------------------------------------------------------------------


class RunNowForm(forms.Form):
    preset = forms.ChoiceField(required=False, label="Manual trigger",
                               help_text="Optional: run with one of the agent's manual triggers (its prompt, "
                                         "filled from the payload).")
    prompt = forms.CharField(required=False, max_length=limits.PROMPT, widget=forms.Textarea(attrs={"rows": 3}),
                             help_text="What the agent should do this time.")
    payload = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4, "data-json": "object"}),
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


class DiffForm(forms.Form):
    a = forms.TypedChoiceField(coerce=int, label="Compare version")
    b = forms.TypedChoiceField(coerce=int, label="with version")

    def __init__(self, *args, numbers=(), **kwargs):
        super().__init__(*args, **kwargs)
        choices = [(n, f"Version {n}") for n in numbers]
        self.fields["a"].choices = choices
        self.fields["b"].choices = choices


def _manual_triggers(request, agent):
    return triggers_filter(user=request.user, agent_id=agent.pk, trigger_type=TriggerType.MANUAL, enabled=True)


@page_login_required
def agent_page(request, agent_id):
    agent, granted = _agent_or_404(request, agent_id)
    form = RunNowForm(request.POST or None, manual_triggers=_manual_triggers(request, agent))
    status = 200
    if request.method == "POST":
        if AGENT_EXECUTE not in granted:
            return render(request, "agents/detail.html", _detail_context(request, agent, form, granted), status=403)
        if form.is_valid():
            started = _run_now(request, agent, form)
            if started is not None:
                return redirect(f"/runs/{started}/")
        status = 400
    return render(request, "agents/detail.html", _detail_context(request, agent, form, granted), status=status)


def _run_now(request, agent, form) -> int | None:
    """The started run's id; otherwise None, with the reason on the form."""
    preset = form.manual_triggers.get(form.cleaned_data["preset"])
    if preset is not None:
        firing = trigger_fire(trigger=preset, payload=form.cleaned_data["payload"], source="ui", user=request.user)
        if firing.execution_id:
            return firing.execution_id
        form.add_error(None, f"Nothing started: {firing.get_reason_display()}. {firing.detail}")
        return None
    try:
        execution = execution_start(agent=agent, request=person_run_request(
            agent=agent, user=request.user, prompt=form.cleaned_data["prompt"], payload=form.cleaned_data["payload"]))
    except InvalidInput as exc:
        form.add_error(None, exc.message)
        return None
    return execution.pk


def _diff_for(request, versions_numbers: list[int], agent) -> tuple[DiffForm, object]:
    """The diff the page shows: the two versions asked for (``a``, ``b``), else the
    deployed version against the one before it."""
    asked = "a" in request.GET or "b" in request.GET
    current = agent.current_version.version if agent.current_version_id else None
    initial_b = current if current is not None else (versions_numbers[0] if versions_numbers else None)
    older = [n for n in versions_numbers if initial_b is not None and n < initial_b]
    initial = {"a": older[0] if older else initial_b, "b": initial_b}
    form = DiffForm(request.GET if asked else None, numbers=versions_numbers, initial=initial)
    if asked and not form.is_valid():
        return form, None
    pair = (form.cleaned_data["a"], form.cleaned_data["b"]) if asked else (initial["a"], initial["b"])
    if None in pair or pair[0] == pair[1]:
        return form, None
    old, new = (agent_version_get(agent=agent, version=n) for n in pair)
    return form, version_diff(old=old, new=new)


def _detail_context(request, agent, form, granted) -> dict:
    triggers = list(triggers_filter(user=request.user, agent_id=agent.pk))
    recent = trigger_firings_recent(trigger_ids=[t.pk for t in triggers], limit=RECENT_FIRINGS)
    versions = list(agent_versions(agent=agent, with_creator=True)[:VERSIONS_SHOWN])
    numbers = agent_version_numbers(agent=agent)
    diff_form, diff = _diff_for(request, numbers, agent)
    return {
        **agent_evaluation_context(agent=agent, versions=versions, granted=granted),
        "agent": agent,
        "form": form,
        "may_run": AGENT_EXECUTE in granted,
        "may_manage": AGENT_CREATE in granted,
        "triggers": [{"trigger": t, "firings": recent.get(t.pk, [])} for t in triggers],
        "replay_batch": replay_batch_latest(agent_id=agent.pk),
        "runs": agent_runs_recent(agent_id=agent.pk, limit=RECENT_RUNS),
        "versions": versions,
        "version_count": len(numbers),
        "diff_form": diff_form,
        "diff": diff,
        "memories": list(reversed(agent_memories_recent(agent_id=agent.pk, limit=MEMORIES_SHOWN))),
        "workspace_memory_template": "agents/_workspace_memory.html",
        "memory_settings": MemorySettingsForm(initial={
            "mode": workspace_memory_mode(workspace_id=agent.workspace_id),
            "personal_consent": memory_consent_given(workspace_id=agent.workspace_id, user_id=request.user.pk),
        }),
        "may_set_memory_mode": POLICY_CREATE in granted,
        "workspace_memories": [{"memory": memory, "may_delete": _may_delete_memory(memory, granted)}
                               for memory in agent_memories_for_user(user=request.user, agent=agent)],
        "can_activate": agent.can_transition_to(Agent.Status.ACTIVE),
        "can_pause": agent.can_transition_to(Agent.Status.PAUSED),
        **canary_panel_context(agent=agent, granted=granted),
    }


@require_POST
@page_login_required
def agent_deploy(request, agent_id, version):
    agent, granted = _agent_or_404(request, agent_id)
    require(granted, AGENT_CREATE)
    chosen = or_404(agent_version_get, agent=agent, version=version)
    try:
        agent_version_deploy(agent=agent, version=chosen, actor=request.user)
    except RiverError as exc:
        messages.error(request, f"Version {chosen.version} was not deployed: {exc.message}")
    else:
        messages.success(request, f"Version {chosen.version} is deployed: new runs use it.")
    return redirect("agent-page", agent_id=agent.pk)


def _may_delete_memory(memory, granted) -> bool:
    """The API's rule: your own personal memory (the only personal ones you can see), or a
    shared one with ``agent:create`` in its workspace."""
    return memory.personal or AGENT_CREATE in granted


@require_POST
@page_login_required
def agent_memory_delete(request, agent_id, memory_id):
    """Forget one workspace memory that this agent's runs wrote (the same rules and
    audit entry as ``DELETE /api/v1/memory/{id}/``). Another workspace's memory, another
    user's personal one, or one of another agent is a 404."""
    agent, granted = _agent_or_404(request, agent_id)
    memory = or_404(memory_get_for_user, user=request.user, memory_id=memory_id)
    if memory.agent_id != agent.pk or memory.workspace_id != agent.workspace_id:
        raise Http404("Memory not found.")
    if not _may_delete_memory(memory, granted):
        require(granted, AGENT_CREATE)
    workspace_memory_delete(memory=memory, actor=request.user)
    messages.success(request, "The memory is deleted: no agent will find it again.")
    return redirect(reverse("agent-page", kwargs={"agent_id": agent.pk}) + "#memory-title")


class MemorySettingsForm(forms.Form):
    mode = forms.ChoiceField(
        choices=WorkspaceSettings.MemoryMode.choices, label="What completed runs remember",
        help_text="Personal: a memory for the person who started the run, if they agreed. Shared: one memory for "
                  "the whole workspace. Off: nothing. Applies to every agent of the workspace; changes are audited.")
    personal_consent = forms.BooleanField(
        required=False, label="Remember what my runs learn, for me only",
        help_text="When the mode is personal, your completed runs in this workspace leave a memory only you and "
                  "your runs find. Turning it off keeps what was remembered; delete it below.")


@require_POST
@page_login_required
def agent_memory_settings(request, agent_id):
    """The workspace's memory settings from an agent's page, as ``PATCH
    /api/v1/memory/settings/`` sets them: everyone sets their own consent to personal
    memory; the mode needs ``policy:create`` (checked before anything is written) and is
    audited."""
    agent, granted = _agent_or_404(request, agent_id)
    form = MemorySettingsForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The memory settings were not saved: " + "; ".join(
            f"{form.fields[name].label}: {' '.join(errors)}" for name, errors in form.errors.items()))
        return redirect(reverse("agent-page", kwargs={"agent_id": agent.pk}) + "#workspace-memory-title")
    mode = form.cleaned_data["mode"]
    changing_mode = mode != workspace_memory_mode(workspace_id=agent.workspace_id)
    if changing_mode:
        require(granted, POLICY_CREATE)
    with transaction.atomic():
        if changing_mode:
            workspace_memory_mode_set(workspace=agent.workspace, mode=mode, actor=request.user)
        memory_consent_set(workspace=agent.workspace, user=request.user,
                           personal=form.cleaned_data["personal_consent"])
    messages.success(request, "Memory settings saved.")
    return redirect(reverse("agent-page", kwargs={"agent_id": agent.pk}) + "#workspace-memory-title")


class StatusForm(forms.Form):
    status = forms.ChoiceField(choices=[(Agent.Status.ACTIVE, "Activate"), (Agent.Status.PAUSED, "Pause")])


@require_POST
@page_login_required
def agent_status(request, agent_id):
    agent, granted = _agent_or_404(request, agent_id)
    require(granted, AGENT_CREATE)
    form = StatusForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose to activate or to pause the agent.")
        return redirect("agent-page", agent_id=agent.pk)
    try:
        agent = agent_transition(agent=agent, target=form.cleaned_data["status"], actor=request.user)
    except RiverError as exc:
        messages.error(request, f"Nothing changed: {exc.message}")
    else:
        messages.success(request, f"{agent.name} is now {agent.get_status_display().lower()}.")
    return redirect("agent-page", agent_id=agent.pk)


# --- versions and new agents ------------------------------------------------------------


def _approver_role_choices() -> list[tuple[str, str]]:
    return [(role, "Organization admins" if role == ORG_ADMIN_ROLE else role.replace("_", " ").capitalize())
            for role in sorted(APPROVER_ROLES)]


class VersionForm(forms.Form):
    goal = forms.CharField(max_length=limits.GOAL, widget=forms.Textarea(attrs={"rows": 2}),
                           help_text="One or two sentences: what the agent is for.")
    instructions = forms.CharField(max_length=limits.PROMPT, widget=forms.Textarea(attrs={"rows": 8}),
                                   help_text="How it should work, step by step, in plain words.")
    action_level = forms.ChoiceField(choices=_choices(ActionLevel), initial=ActionLevel.READ_ONLY,
                                     help_text="Read only: it only reads. Recommend: it proposes, people act. Act "
                                               "with approval: each change waits for a person. Automated: it acts "
                                               "alone.")
    governance_level = forms.ChoiceField(choices=_choices(GovernanceLevel), initial=GovernanceLevel.STANDARD)
    tools = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                      help_text="What the agent may do.")
    require_approval_for = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Ask a person before",
        help_text="These tools wait for an approver's yes each time (they must be among the tools above).")
    approver_roles = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple, label="Who may approve", initial=list(ApprovalRules().approver_roles),
        help_text="Members with one of these roles (and approval rights) decide this agent's requests.")
    escalation_timeout_minutes = forms.IntegerField(
        min_value=1, max_value=MAX_ESCALATION_TIMEOUT_MINUTES, initial=ApprovalRules().escalation_timeout_minutes,
        label="Minutes before a request escalates", help_text="A request nobody decided in this time escalates.")
    data_sources = forms.TypedMultipleChoiceField(coerce=int, required=False, widget=forms.CheckboxSelectMultiple,
                                                  help_text="The databases it may read.")
    max_turns = forms.IntegerField(min_value=1, max_value=100, initial=ModelConfig().max_turns,
                                   label="Most steps per run")
    token_budget = forms.IntegerField(min_value=100, max_value=MAX_TOKEN_BUDGET, initial=ModelConfig().token_budget,
                                      label="Token budget per run")

    def __init__(self, *args, workspace, **kwargs):
        super().__init__(*args, **kwargs)
        # Built-in tools, then the workspace's reviewed MCP tools (toolservers), plus any MCP
        # tool the base version lists that is no longer usable: shown, so saving does not drop
        # it silently (the service refuses it at the field, naming why).
        listed = self.initial.get("tools") or []
        mcp_names = sorted(set(mcp_tools_usable_in_workspace(workspace_id=workspace.pk))
                           | {name for name in listed if isinstance(name, str) and name.startswith("mcp:")})
        choices = [*_tool_choices(), *((name, f"MCP tool {name.removeprefix('mcp:')} ({name})") for name in mcp_names)]
        self.fields["tools"].choices = choices
        self.fields["require_approval_for"].choices = choices
        self.fields["approver_roles"].choices = _approver_role_choices()
        self.fields["data_sources"].choices = data_source_choices(workspace_id=workspace.pk, limit=limits.LIST_ITEMS)

    def version_config(self, base: AgentVersion | None = None, auto_approve: list[dict] | None = None,
                       quorum: list[dict] | None = None, escalation: list[dict] | None = None) -> dict:
        """The keyword arguments of ``agent_version_create``; settings the form does not
        show are carried over from ``base`` (its auto-approve conditions, quorum rules and
        escalation chain too, unless the formsets' rows replace them)."""
        data = self.cleaned_data
        model_config = dict(base.model_config or {}) if base else {}
        model_config.update(max_turns=data["max_turns"], token_budget=data["token_budget"])
        approval_rules = dict(base.approval_rules or {}) if base else {}
        approval_rules.update(require_approval_for=list(data["require_approval_for"]),
                              approver_roles=list(data["approver_roles"]),
                              escalation_timeout_minutes=data["escalation_timeout_minutes"])
        if auto_approve is not None:
            approval_rules["auto_approve_conditions"] = auto_approve
        if quorum is not None:
            approval_rules["quorum"] = quorum
        if escalation is not None:
            approval_rules["escalation"] = escalation
        config = {
            "goal": data["goal"], "instructions": data["instructions"], "action_level": data["action_level"],
            "governance_level": data["governance_level"], "tools": list(data["tools"]),
            "approval_rules": approval_rules, "model_config": model_config,
            "data_source_ids": list(data["data_sources"]),
        }
        if base is not None:
            config.update(system_prompt=base.system_prompt, notification_config=dict(base.notification_config or {}))
        return config


class AutoApproveForm(forms.Form):
    """One auto-approve condition: the tool whose approval it may skip, and when."""

    tool = forms.ChoiceField(required=False, label="Tool")
    condition = forms.CharField(
        required=False, max_length=MAX_EXPRESSION_CHARS, strip=False, label="Approve without asking when",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "autocomplete": "off",
                                     "class": "condition-expression", "data-auto-approve-condition": ""}),
        help_text="For example confidence_score >= 0.9 AND args.table_name == 'tickets'. It may look at the "
                  "call only: confidence_score, tool.name and args.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tool"].choices = [("", "— choose a tool —"), *_tool_choices()]

    def clean(self):
        cleaned = super().clean()
        tool, condition = cleaned.get("tool"), (cleaned.get("condition") or "").strip()
        if condition and not tool:
            self.add_error("tool", "Choose the tool this condition approves.")
        if tool and not condition:
            self.add_error("condition", "Type the condition, or choose no tool to remove this one.")
        return cleaned

    @property
    def rule(self) -> dict | None:
        """The rule this row holds, None when it is left empty."""
        data = self.cleaned_data
        if not data.get("tool"):
            return None
        return {"tool": data["tool"], "condition": data["condition"]}


AutoApproveFormSet = forms.formset_factory(AutoApproveForm, extra=1, max_num=50, absolute_max=50,
                                           validate_max=True)
AUTO_APPROVE_PREFIX = "auto"


class QuorumForm(forms.Form):
    """One quorum rule (issue 29 §3): how many distinct people approve a call, and when."""

    approvals = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_REQUIRED_APPROVALS, label="Approvers needed",
        help_text=f"Different people, 1 to {MAX_REQUIRED_APPROVALS}; the run's requester never counts and one "
                  "rejection ends the request.")
    when = forms.CharField(
        required=False, max_length=limits.GOAL, strip=False, label="When the call matches",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "autocomplete": "off",
                                     "class": "condition-expression"}),
        help_text="Optional; empty means every call that asks a person. For example "
                  "args.operation == 'delete' OR rows > 100 (tool.name, args, confidence_score, rows).")

    def clean(self):
        cleaned = super().clean()
        if (cleaned.get("when") or "").strip() and cleaned.get("approvals") is None and "approvals" not in self.errors:
            self.add_error("approvals", "Say how many approvers this rule needs, or clear the condition.")
        return cleaned

    @property
    def rule(self) -> dict | None:
        data = self.cleaned_data
        if data.get("approvals") is None:
            return None
        when = data.get("when") or ""
        # As typed: the service's error positions count from what the person sees.
        return {"approvals": data["approvals"], "when": when if when.strip() else None}


class EscalationForm(forms.Form):
    """One step of the escalation chain: after how long an undecided request moves, and to whom."""

    after_minutes = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_ESCALATION_TIMEOUT_MINUTES, label="After (minutes)",
        help_text="Counted from when the request opened; later than the step before, earlier than the expiry.")
    approver_roles = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Moves to",
        help_text="These roles decide from then on (organization admins always may).")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["approver_roles"].choices = _approver_role_choices()

    def clean(self):
        cleaned = super().clean()
        minutes, roles = cleaned.get("after_minutes"), cleaned.get("approver_roles")
        if roles and minutes is None and "after_minutes" not in self.errors:
            self.add_error("after_minutes", "Say after how many minutes, or clear the roles.")
        if minutes is not None and not roles and "approver_roles" not in self.errors:
            self.add_error("approver_roles", "Choose who the request moves to, or clear the minutes.")
        return cleaned

    @property
    def rule(self) -> dict | None:
        data = self.cleaned_data
        if data.get("after_minutes") is None:
            return None
        return {"after_minutes": data["after_minutes"], "approver_roles": list(data["approver_roles"])}


QuorumFormSet = forms.formset_factory(QuorumForm, extra=1, max_num=20, absolute_max=20, validate_max=True)
EscalationFormSet = forms.formset_factory(EscalationForm, extra=1, max_num=5, absolute_max=5, validate_max=True)
QUORUM_PREFIX = "quorum"
ESCALATION_PREFIX = "escalation"


def _version_initial(version: AgentVersion) -> dict:
    rules = version.rules
    return {
        "goal": version.goal, "instructions": version.instructions, "action_level": version.action_level,
        "governance_level": version.governance_level, "tools": list(version.tools or []),
        "require_approval_for": list(rules.require_approval_for), "approver_roles": list(rules.approver_roles),
        "escalation_timeout_minutes": rules.escalation_timeout_minutes,
        "data_sources": [source.pk for source in version.data_sources.all()],
        "max_turns": version.model_settings.max_turns, "token_budget": version.model_settings.token_budget,
    }


# Where a version service's error details land on the form.
VERSION_FIELD_MAP = {"approval_rules": "require_approval_for", "model_config": "max_turns",
                     "model_config.max_turns": "max_turns", "model_config.token_budget": "token_budget"}


def _version_errors_onto_forms(form, lists: dict, exc: RiverError) -> None:
    """The service's error next to the field it names. Approval rules' details are keyed
    inside ``approval_rules``: ``<list>.<n>.<field>`` for the rules kept as rows
    (``auto_approve_conditions``, ``quorum``, ``escalation``; ``lists`` maps each to its
    formset and the formset row of each rule sent), the rules' own fields otherwise."""
    details = dict(exc.details) if isinstance(exc.details, dict) else {}
    rules = details.pop("approval_rules", None)
    for key, found in (rules.items() if isinstance(rules, dict) else []):
        parts = key.split(".")
        formset, rows = lists.get(parts[0], (None, []))
        if formset is not None and len(parts) >= 2 and parts[1].isdigit() and int(parts[1]) < len(rows):
            row = formset.forms[rows[int(parts[1])]]
            field = parts[2] if len(parts) >= 3 and parts[2] in row.fields else None
            for message in found if isinstance(found, list) else [found]:
                row.add_error(field, str(message))
        else:
            details[key] = found
    if rules is not None and not isinstance(rules, dict):
        details["approval_rules"] = rules
    if details:
        errors_onto_form(form, InvalidInput(exc.message, details=details), VERSION_FIELD_MAP)


def _filled_rows(formset) -> tuple[list[dict], list[int]]:
    """The rules of the rows that are filled in, and each one's row number."""
    rules, rows = [], []
    for index, row in enumerate(formset.forms):
        if row.rule is not None:
            rules.append(row.rule)
            rows.append(index)
    return rules, rows


def _auto_approve_initial(version: AgentVersion | None) -> list[dict]:
    return [rule.model_dump() for rule in version.rules.auto_approve_conditions] if version else []


def _quorum_initial(version: AgentVersion | None) -> list[dict]:
    return [{"approvals": rule.approvals, "when": rule.when or ""} for rule in version.rules.quorum] if version else []


def _escalation_initial(version: AgentVersion | None) -> list[dict]:
    return [step.model_dump(mode="json") for step in version.rules.escalation] if version else []


@page_login_required
def version_new(request, agent_id):
    agent, granted = _agent_or_404(request, agent_id)
    require(granted, AGENT_CREATE)
    base = agent.current_version or agent_versions(agent=agent).first()
    if base is not None:
        base = agent_version_get(agent=agent, version=base.version)  # with its data sources
    form = VersionForm(request.POST or None, workspace=agent.workspace,
                       initial=_version_initial(base) if base else None)
    # A posted row counts as typed, whatever it started as: no initial data to compare with.
    posted = request.method == "POST"
    formset = AutoApproveFormSet(request.POST or None, prefix=AUTO_APPROVE_PREFIX,
                                 initial=None if posted else _auto_approve_initial(base))
    # A post without a list's management form (an older page) keeps the base version's rules.
    quorum_posted = posted and f"{QUORUM_PREFIX}-TOTAL_FORMS" in request.POST
    escalation_posted = posted and f"{ESCALATION_PREFIX}-TOTAL_FORMS" in request.POST
    quorum_formset = QuorumFormSet(request.POST if quorum_posted else None, prefix=QUORUM_PREFIX,
                                   initial=None if quorum_posted else _quorum_initial(base))
    escalation_formset = EscalationFormSet(request.POST if escalation_posted else None, prefix=ESCALATION_PREFIX,
                                           initial=None if escalation_posted else _escalation_initial(base))
    status = 200
    if posted:
        status = 400
        # all of them, so each shows its errors
        valid = [formset.is_valid(), not quorum_posted or quorum_formset.is_valid(),
                 not escalation_posted or escalation_formset.is_valid(), form.is_valid()]
        if all(valid):
            rules, rows = _filled_rows(formset)
            quorum, quorum_rows = _filled_rows(quorum_formset) if quorum_posted else (None, [])
            escalation, escalation_rows = _filled_rows(escalation_formset) if escalation_posted else (None, [])
            try:
                version = agent_version_create(agent=agent, actor=request.user, **form.version_config(
                    base, auto_approve=rules, quorum=quorum, escalation=escalation))
            except RiverError as exc:
                _version_errors_onto_forms(form, {"auto_approve_conditions": (formset, rows),
                                                  "quorum": (quorum_formset, quorum_rows),
                                                  "escalation": (escalation_formset, escalation_rows)}, exc)
            else:
                messages.success(request, f"Version {version.version} saved. Compare it below, then deploy it "
                                          "when it is right.")
                url = reverse("agent-page", kwargs={"agent_id": agent.pk})
                compare = f"a={base.version}&b={version.version}" if base else ""
                return redirect(f"{url}?{compare}#versions" if compare else f"{url}#versions")
    return render(request, "agents/version_new.html", {
        "agent": agent, "form": form, "base": base, "formset": formset, "quorum_formset": quorum_formset,
        "escalation_formset": escalation_formset,
        "builder": {"tools": sorted(TOOL_NAMES), "tables": catalog_tables(workspace=agent.workspace)},
    }, status=status)


@page_login_required
@require_GET
def auto_approve_validate_json(request, agent_id):
    """Validate a draft auto-approve condition with the check a saved version gets
    (``governance.checker.auto_approve_condition_validate``, the API's messages)."""
    agent, granted = _agent_or_404(request, agent_id)
    require(granted, AGENT_CREATE)
    expression = request.GET.get("expression", "")
    if len(expression) > MAX_EXPRESSION_CHARS:
        return error_json(InvalidInput("Condition too long.", details={
            "condition": [f"Ensure this field has no more than {MAX_EXPRESSION_CHARS} characters."]}))
    try:
        auto_approve_condition_validate(expression)
    except ExpressionError as exc:
        return error_json(InvalidInput("The agent version is invalid.", details={"condition": [str(exc)]}))
    return JsonResponse({"valid": True})


class AgentForm(VersionForm):
    name = forms.CharField(max_length=limits.NAME)
    description = forms.CharField(required=False, max_length=limits.DESCRIPTION,
                                  widget=forms.Textarea(attrs={"rows": 2}))
    business_function = forms.ChoiceField(choices=_choices(BusinessFunction), label="Business function")
    domain = forms.CharField(required=False, max_length=limits.NAME, help_text="Optional, for example EMEA billing.")

    field_order = ["name", "description", "business_function", "domain"]


@page_login_required
def agent_new(request):
    workspace, granted = workspace_and_permissions(request)
    if workspace is None:
        raise Http404("You belong to no workspace.")
    require(granted, AGENT_CREATE)
    form = AgentForm(request.POST or None, workspace=workspace)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            agent = _agent_save(request, workspace, form)
            if agent is not None:
                messages.success(request, f"{agent.name} is saved as a draft with version 1 deployed. Activate it "
                                          "when you are ready.")
                return redirect("agent-page", agent_id=agent.pk)
    return render(request, "agents/new.html", {"form": form, "workspace": workspace}, status=status)


def _agent_save(request, workspace, form) -> Agent | None:
    """The agent, its first version and that version deployed, all or nothing."""
    data = form.cleaned_data
    try:
        with transaction.atomic():
            agent = agent_create(workspace=workspace, owner=request.user, name=data["name"],
                                 business_function=data["business_function"], domain=data["domain"],
                                 description=data["description"])
            version = agent_version_create(agent=agent, actor=request.user, **form.version_config())
            return agent_version_deploy(agent=agent, version=version, actor=request.user)
    except RiverError as exc:
        _version_errors_onto_forms(form, {}, exc)
        return None


class DescribeForm(forms.Form):
    description = forms.CharField(
        max_length=limits.PROMPT, widget=forms.Textarea(attrs={"rows": 5}), label="Describe the agent",
        help_text="What should it do, with which data, how often, and may it change anything? For example: "
                  "monitor support tickets every hour and draft replies for urgent ones.")


@page_login_required
def agent_describe(request):
    """A description in, a draft configuration out, shown in the new-agent form for
    review: nothing is saved until the person saves that form."""
    workspace, granted = workspace_and_permissions(request)
    if workspace is None:
        raise Http404("You belong to no workspace.")
    require(granted, AGENT_CREATE)
    form = DescribeForm(request.POST or None)
    if request.method != "POST":
        return render(request, "agents/describe.html", {"form": form})
    if not form.is_valid():
        return render(request, "agents/describe.html", {"form": form}, status=400)
    try:
        suggestion = _generate(request, workspace, granted, form.cleaned_data["description"])
    except RiverError as exc:
        form.add_error("description", f"River could not draft an agent from this: {exc.message} Try again, or "
                                      "describe it in other words.")
        return render(request, "agents/describe.html", {"form": form})
    config = suggestion.agent_config
    policies_tools = [str(p.conditions.get("tool")) for p in config.suggested_policies
                      if p.enforcement == "require_approval" and p.conditions.get("tool")]
    tools = [tool.tool_name for tool in config.suggested_tools]
    draft = AgentForm(workspace=workspace, initial={
        "name": config.name[:limits.NAME], "description": config.description[:limits.DESCRIPTION],
        "business_function": config.category.value, "goal": config.goal, "instructions": config.instructions,
        "action_level": config.action_level.value, "tools": tools,
        "require_approval_for": [name for name in policies_tools if name in tools],
        "data_sources": [source.data_source_id for source in config.suggested_data_sources],
    })
    return render(request, "agents/new.html", {"form": draft, "workspace": workspace, "suggestion": suggestion,
                                               "description": form.cleaned_data["description"]})


def _generate(request, workspace, granted, description: str):
    from executions.routing import router_for_organization
    from rivercore.generate import agent_generate

    sources = data_sources_first(workspace_id=workspace.pk, limit=limits.LIST_ITEMS)
    body = GenerateAgentRequest(
        prompt=description,
        user_context=UserContext(user_id=request.user.pk, org_id=workspace.organization_id,
                                 workspace_id=workspace.pk, roles=workspace_roles(user=request.user,
                                                                                  workspace=workspace),
                                 permissions=sorted(granted)),
        available_data_sources=[AvailableDataSource(data_source_id=s.pk, name=s.name, type=s.type,
                                                    description=s.description[:500]) for s in sources],
        available_tools=sorted(TOOL_NAMES),
    )
    return agent_generate(request=body, llm=router_for_organization(organization_id=workspace.organization_id))


urlpatterns = [
    path("agents/", agents_list, name="agents"),
    path("agents/new/", agent_new, name="agent-new"),
    path("agents/new/describe/", agent_describe, name="agent-describe"),
    path("agents/<str:agent_id>/", agent_page, name="agent-page"),
    path("agents/<str:agent_id>/status", agent_status, name="agent-status"),
    path("agents/<str:agent_id>/memory/<str:memory_id>/delete", agent_memory_delete, name="agent-memory-delete"),
    path("agents/<str:agent_id>/memory/settings", agent_memory_settings, name="agent-memory-settings"),
    path("agents/<str:agent_id>/versions/new/", version_new, name="agent-version-new"),
    path("agents/<str:agent_id>/versions/validate-condition", auto_approve_validate_json,
         name="agent-auto-approve-validate"),
    path("agents/<str:agent_id>/versions/<int:version>/deploy", agent_deploy, name="agent-deploy"),
]

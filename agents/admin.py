from django import forms
from django.contrib import admin, messages
from django.db.models import Q

from agents.evaluation_models import Evaluation, PromotionGate, TestSetPin
from agents.models import Agent, AgentMemory, AgentVersion, MemoryConsent, WorkspaceMemory
from agents.services import (
    agent_team_update,
    agent_transition,
    agent_version_create,
    agent_version_spec,
    team_parent_problem,
)
from common.formfields import BoundedJSONField
from rivercore.errors import RiverError
from tenancy.admin_scoping import (
    ScopedInlineMixin,
    TenantScopedAdmin,
    ViewAndDeleteTenantScopedAdmin,
    ViewOnlyTenantScopedAdmin,
)

_KEEP = object()


class AgentVersionInline(ScopedInlineMixin, admin.TabularInline):
    model = AgentVersion
    fields = ["version", "action_level", "governance_level", "created_by", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


_TEAM_FIELDS = ("parent_agent", "disallow_transfer_to_parent", "disallow_transfer_to_peers")


class AgentForm(forms.ModelForm):
    """Refuses a parent of another workspace, the agent itself or one of its sub-agents
    (a cycle), naming ``parent_agent``, with the same check as the API."""

    class Meta:
        model = Agent
        fields = ["workspace", "name", "description", "business_function", "domain", "owner", *_TEAM_FIELDS]
        help_texts = {
            "workspace": "The workspace the agent works in: its data sources, policies and people.",
            "name": "How people will recognise the agent, e.g. \"Refund triage\".",
            "description": "What the agent is for, in a sentence or two.",
            "business_function": "The team the agent works for; used to group agents and in reports.",
            "domain": "The subject it knows about, e.g. \"EU customer support\" (optional).",
            "owner": "The person responsible for the agent.",
            "parent_agent": "Makes this agent a member of a team: the agent it reports to. Leave empty for a "
                            "team's entry agent or an agent on its own.",
            "disallow_transfer_to_parent": "Tick to stop this agent handing a conversation back to its parent.",
            "disallow_transfer_to_peers": "Tick to stop this agent handing a conversation to its siblings.",
        }

    def clean(self):
        cleaned = super().clean()
        parent, workspace = cleaned.get("parent_agent"), cleaned.get("workspace")
        if parent is not None and workspace is not None:
            probe = Agent(pk=self.instance.pk, workspace_id=workspace.pk, name=cleaned.get("name") or "this agent")
            problem = team_parent_problem(agent=probe, parent=parent)
            if problem:
                self.add_error("parent_agent", problem)
        return cleaned


@admin.register(Agent)
class AgentAdmin(TenantScopedAdmin):
    """Status changes go through the lifecycle actions, which check and audit them;
    team changes through ``agent_team_update`` (checked again under the workspace's
    lock, and audited)."""

    tenant_path = "workspace__organization"
    form = AgentForm
    list_display = ["name", "workspace", "business_function", "status", "health", "current_version", "owner"]
    list_select_related = ["workspace", "owner", "current_version__agent"]
    list_filter = ["status", "health", "business_function", "workspace__organization", "workspace"]
    search_fields = ["name", "domain", "description", "owner__username"]
    readonly_fields = ["id", "status", "health", "consecutive_failures", "current_version", "created_at", "updated_at"]
    autocomplete_fields = ["workspace", "owner", "parent_agent"]
    inlines = [AgentVersionInline]
    actions = ["activate", "pause", "archive"]

    def save_model(self, request, obj, form, change):
        team = {name: form.cleaned_data.get(name) for name in _TEAM_FIELDS if name in form.changed_data}
        if change and team:  # the other fields are saved here, the team change by the service below
            stored = Agent.objects.only(*_TEAM_FIELDS).get(pk=obj.pk)
            for name in team:
                setattr(obj, name, getattr(stored, name))
        elif team:
            obj.parent_agent = None  # a new agent is saved as a root first, then placed in its team
        super().save_model(request, obj, form, change)
        if team:
            parent = team.pop("parent_agent", None) if "parent_agent" in team else _KEEP
            kwargs = {} if parent is _KEEP else {"parent_agent_id": parent.pk if parent else None}
            try:
                agent_team_update(agent=obj, actor=request.user, **kwargs, **team)
            except RiverError as exc:
                self.message_user(request, f"{obj}: team not changed: {exc.message}", messages.ERROR)

    def _transition(self, request, queryset, target: str) -> None:
        moved = 0
        for agent in queryset:
            try:
                agent_transition(agent=agent, target=target, actor=request.user)
                moved += 1
            except RiverError as exc:
                self.message_user(request, f"{agent}: {exc.message}", messages.ERROR)
        if moved:
            self.message_user(request, f"{moved} agent(s) now {target}.", messages.SUCCESS)

    @admin.action(description="Activate selected agents")
    def activate(self, request, queryset):
        self._transition(request, queryset, Agent.Status.ACTIVE)

    @admin.action(description="Pause selected agents")
    def pause(self, request, queryset):
        self._transition(request, queryset, Agent.Status.PAUSED)

    @admin.action(description="Archive selected agents")
    def archive(self, request, queryset):
        self._transition(request, queryset, Agent.Status.ARCHIVED)


def _messages(problems) -> list[str]:
    """Flatten service error details ({"require_approval_for": [...]} or [...]) into lines."""
    if isinstance(problems, dict):
        return [f"{key}: {'; '.join(_messages(value))}" for key, value in problems.items()]
    if isinstance(problems, list):
        return [str(problem) for problem in problems]
    return [str(problems)]


class AgentVersionForm(forms.ModelForm):
    """Creates a version through the same checks as the API (agents.services)."""

    class Meta:
        model = AgentVersion
        fields = [
            "agent",
            "goal",
            "instructions",
            "system_prompt",
            "action_level",
            "governance_level",
            "model_config",
            "tools",
            "approval_rules",
            "notification_config",
            "data_sources",
        ]
        field_classes = {
            name: BoundedJSONField for name in ("model_config", "tools", "approval_rules", "notification_config")
        }
        help_texts = {
            "agent": "The agent this version is for. Saving makes a new numbered version; deploy it from the "
                     "agent's page or the API.",
            "goal": "What the agent should achieve, in one or two sentences.",
            "instructions": "How it should work: the steps, the tone, what to avoid.",
            "system_prompt": "Optional. Extra text put before everything else the model reads.",
            "action_level": "How far the agent may act on its own. Recommend: it only suggests; Read only: it "
                            "may read data; Act with approval: changes wait for a person's approval; "
                            "Automated: it may act without asking (policies still apply).",
            "governance_level": "A label kept with the version (standard, strict or custom). What is blocked "
                                "or needs approval is decided by the action level and the policies.",
            "model_config": 'Optional. Which kind of model to use and the limits of a run, e.g. '
                            '{"preferred_tier": "balanced", "max_turns": 15}. Empty uses the defaults '
                            "(15 turns, 100,000 tokens).",
            "tools": 'The tools the agent may use, e.g. ["execute_query", "explain_results", "ask_user"]. '
                     "An unknown name is refused when you save.",
            "approval_rules": 'Optional. Which tools need a person\'s approval and who may give it, e.g. '
                              '{"require_approval_for": ["write_back"], "approver_roles": ["admin"]}.',
            "notification_config": "Optional. Who is told about this agent's runs, and how.",
            "data_sources": "The data sources of its workspace the agent may read.",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Empty JSON means "the typed defaults" (e.g. max_turns 15), filled in by the service.
        for name in ("model_config", "tools", "approval_rules", "notification_config"):
            if name in self.fields:
                self.fields[name].required = False

    def clean(self):
        cleaned = super().clean()
        if self.errors or cleaned.get("agent") is None:
            return cleaned
        try:
            agent_version_spec(**self.service_arguments())
        except RiverError as exc:
            details = exc.details if isinstance(exc.details, dict) else {}
            for field, problems in details.items():
                messages_ = _messages(problems)
                if field in self.fields:
                    self.add_error(field, messages_)
                else:
                    self.add_error(None, [f"{field}: {message}" for message in messages_])
            if not details:
                self.add_error(None, exc.message)
        return cleaned

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        return {
            "agent": data["agent"],
            "goal": data.get("goal", ""),
            "instructions": data.get("instructions", ""),
            "system_prompt": data.get("system_prompt", ""),
            "action_level": data.get("action_level", ""),
            "governance_level": data.get("governance_level", ""),
            "model_config": data.get("model_config") or {},
            "tools": data.get("tools") or [],
            "approval_rules": data.get("approval_rules") or {},
            "notification_config": data.get("notification_config") or {},
            "data_source_ids": [source.pk for source in data.get("data_sources") or []],
        }


@admin.register(AgentVersion)
class AgentVersionAdmin(TenantScopedAdmin):
    """Versions are immutable: they can be added and viewed, never edited."""

    tenant_path = "agent__workspace__organization"
    form = AgentVersionForm
    list_display = ["agent", "version", "action_level", "governance_level", "created_by", "created_at"]
    list_filter = ["action_level", "governance_level", "agent__workspace"]
    search_fields = ["agent__name", "goal"]
    autocomplete_fields = ["agent"]

    def has_change_permission(self, request, obj=None):
        if obj is not None:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return False

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return [field.name for field in AgentVersion._meta.fields] + ["data_sources"]

    def save_form(self, request, form, change):
        # The service numbers and stores the version; the form already ran its checks.
        return agent_version_create(actor=request.user, **form.service_arguments())

    def save_model(self, request, obj, form, change):
        """Saved by save_form."""

    def save_related(self, request, form, formsets, change):
        """Data sources were bound by the service."""


@admin.register(AgentMemory)
class AgentMemoryAdmin(ViewAndDeleteTenantScopedAdmin):
    tenant_path = "agent__workspace__organization"
    list_display = ["agent", "execution_id", "created_at"]
    list_filter = ["agent__workspace"]
    search_fields = ["agent__name", "summary", "execution_id"]
    readonly_fields = ["agent", "execution_id", "summary", "learnings", "flagged_items", "created_at"]


@admin.register(WorkspaceMemory)
class WorkspaceMemoryAdmin(ViewOnlyTenantScopedAdmin):
    """Read-only: memories are deleted over the API, which checks who may and audits it.
    A personal memory is its owner's: organization admins see the shared ones and their
    own (superusers see all)."""

    tenant_path = "workspace__organization"

    list_display = ["id", "workspace", "user", "agent", "source_execution_id", "created_at"]
    list_select_related = ["workspace", "user", "agent"]
    list_filter = ["workspace"]
    search_fields = ["content"]
    readonly_fields = ["workspace", "user", "agent", "content", "keywords", "source_execution_id", "created_at"]

    def get_queryset(self, request):
        rows = super().get_queryset(request)
        if request.user.is_superuser:
            return rows
        return rows.filter(Q(user__isnull=True) | Q(user=request.user))


@admin.register(MemoryConsent)
class MemoryConsentAdmin(ViewOnlyTenantScopedAdmin):
    """Read-only: a consent is the user's own to give or withdraw."""

    tenant_path = "workspace__organization"

    list_display = ["workspace", "user", "personal", "updated_at"]
    list_filter = ["workspace", "personal"]
    readonly_fields = ["workspace", "user", "personal", "updated_at"]



# Evaluations, the promotion gate and test sets (docs/changing-safely.md): read here,
# written by their services (which check who may and audit it).


@admin.register(Evaluation)
class EvaluationAdmin(ViewOnlyTenantScopedAdmin):
    tenant_path = "workspace__organization"
    list_display = ["id", "agent", "version", "status", "runs_done", "runs_total", "created_at"]
    list_select_related = ["agent", "version__agent"]
    list_filter = ["status", "workspace"]
    readonly_fields = ["workspace", "agent", "version", "days", "status", "runs_total", "runs_done", "scores",
                       "totals", "error", "requested_by", "created_at", "started_at", "finished_at"]


@admin.register(PromotionGate)
class PromotionGateAdmin(ViewOnlyTenantScopedAdmin):
    tenant_path = "workspace__organization"
    list_display = ["workspace", "min_approvals", "min_rejections", "min_edits", "updated_by", "updated_at"]
    readonly_fields = list_display


@admin.register(TestSetPin)
class TestSetPinAdmin(ViewOnlyTenantScopedAdmin):
    tenant_path = "agent__workspace__organization"
    list_display = ["agent", "execution_id", "label", "pinned_by", "created_at"]
    list_filter = ["label"]
    readonly_fields = ["agent", "execution_id", "label", "note", "pinned_by", "created_at"]

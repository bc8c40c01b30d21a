from django import forms
from django.contrib import admin, messages

from agents.models import Agent, AgentMemory, AgentVersion, MemoryConsent, WorkspaceMemory
from agents.services import agent_transition, agent_version_create, agent_version_spec
from common.formfields import BoundedJSONField
from rivercore.errors import RiverError


class AgentVersionInline(admin.TabularInline):
    model = AgentVersion
    fields = ["version", "action_level", "governance_level", "created_by", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    """Status changes go through the lifecycle actions, which check and audit them."""

    list_display = ["name", "workspace", "business_function", "status", "health", "current_version", "owner"]
    list_filter = ["status", "health", "business_function", "workspace__organization", "workspace"]
    search_fields = ["name", "domain", "description", "owner__username"]
    readonly_fields = ["id", "status", "health", "consecutive_failures", "current_version", "created_at", "updated_at"]
    autocomplete_fields = ["workspace", "owner"]
    inlines = [AgentVersionInline]
    actions = ["activate", "pause", "archive"]

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
class AgentVersionAdmin(admin.ModelAdmin):
    """Versions are immutable: they can be added and viewed, never edited."""

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
class AgentMemoryAdmin(admin.ModelAdmin):
    list_display = ["agent", "execution_id", "created_at"]
    list_filter = ["agent__workspace"]
    search_fields = ["agent__name", "summary", "execution_id"]
    readonly_fields = ["agent", "execution_id", "summary", "learnings", "flagged_items", "created_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(WorkspaceMemory)
class WorkspaceMemoryAdmin(admin.ModelAdmin):
    """Read-only: memories are deleted over the API, which checks who may and audits it."""

    list_display = ["id", "workspace", "user", "agent", "source_execution_id", "created_at"]
    list_filter = ["workspace"]
    search_fields = ["content"]
    readonly_fields = ["workspace", "user", "agent", "content", "keywords", "source_execution_id", "created_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(MemoryConsent)
class MemoryConsentAdmin(admin.ModelAdmin):
    """Read-only: a consent is the user's own to give or withdraw."""

    list_display = ["workspace", "user", "personal", "updated_at"]
    list_filter = ["workspace", "personal"]
    readonly_fields = ["workspace", "user", "personal", "updated_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

from django import forms
from django.contrib import admin

from common.crypto import encrypt_text
from executions.models import Execution, ExecutionEvent, ExecutionStep, LLMProvider, Session, SessionMessage
from executions.providers import provider_models_parse
from rivercore.errors import InvalidInput
from tenancy.admin_scoping import ScopedInlineMixin, TenantScopedAdmin, ViewOnlyTenantScopedAdmin


class ExecutionStepInline(ScopedInlineMixin, admin.TabularInline):
    model = ExecutionStep
    fields = ["step_number", "turn", "step_type", "tool_name", "status", "governance_decision", "duration_ms"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Execution)
class ExecutionAdmin(ViewOnlyTenantScopedAdmin):
    tenant_path = "workspace__organization"
    list_display = ["id", "agent", "workspace", "status", "trigger_type", "parent_execution_id", "turn_count",
                    "cost_usd", "queued_at"]
    list_filter = ["status", "trigger_type", "workspace"]
    search_fields = ["id", "agent__name", "input_prompt", "requested_by__username"]
    date_hierarchy = "queued_at"
    inlines = [ExecutionStepInline]


@admin.register(ExecutionStep)
class ExecutionStepAdmin(ViewOnlyTenantScopedAdmin):
    tenant_path = "execution__workspace__organization"
    list_display = ["execution", "step_number", "turn", "step_type", "tool_name", "status", "created_at"]
    list_filter = ["step_type", "status", "governance_decision"]
    search_fields = ["execution__id", "tool_name", "call_id"]
    list_select_related = ["execution"]


@admin.register(ExecutionEvent)
class ExecutionEventAdmin(ViewOnlyTenantScopedAdmin):
    tenant_path = "execution__workspace__organization"
    list_display = ["execution", "seq", "event_type", "created_at"]
    list_filter = ["event_type"]
    search_fields = ["execution__id", "event_type"]
    list_select_related = ["execution"]


class HttpsURLField(forms.URLField):
    """A URL typed without a scheme is taken as https (Django 6's default, chosen now)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("assume_scheme", "https")
        super().__init__(**kwargs)


class LLMProviderForm(forms.ModelForm):
    """The key is write-only: never rendered back; a blank field keeps the stored one."""

    api_key = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
        help_text="The secret key from the provider's console. It is stored encrypted and never "
                  "shown again; leave blank to keep the current key.",
    )
    clear_api_key = forms.BooleanField(required=False, help_text="Tick to remove the stored key.")

    class Meta:
        model = LLMProvider
        fields = [
            "organization",
            "provider_name",
            "api_key",
            "clear_api_key",
            "base_url",
            "tier_models",
            "priority",
            "max_retries",
            "timeout_seconds",
            "rate_limit_rpm",
            "enabled",
        ]
        field_classes = {"base_url": HttpsURLField}
        labels = {"tier_models": "Models"}
        help_texts = {
            "organization": "The organization whose agents may use this provider.",
            "provider_name": "A short name, unique in the organization, e.g. openai or anthropic.",
            "base_url": "Only for a self-hosted or proxy endpoint, e.g. https://llm.example.com/v1. "
                        "Leave empty to use the provider's usual address.",
            "tier_models": 'Which model answers each kind of request, e.g. {"fast": "openai/gpt-4o-mini", '
                           '"reasoning": "openai/o3"}. Kinds: fast, balanced, reasoning, coding.',
            "priority": "When several providers offer the same kind, the lowest number is tried first.",
            "max_retries": "How many times a failed call is tried again on this provider before the next "
                           "provider is tried.",
            "timeout_seconds": "How long to wait for one answer before giving up on that call.",
            "rate_limit_rpm": "At most this many calls per minute go to this provider.",
            "enabled": "Untick to stop using this provider without deleting it.",
        }

    def clean(self):
        cleaned = super().clean()
        organization, name = cleaned.get("organization"), (cleaned.get("provider_name") or "").strip()
        duplicate = LLMProvider.objects.filter(organization=organization, provider_name=name)
        if organization is not None and name and duplicate.exclude(pk=self.instance.pk).exists():
            self.add_error("provider_name", "This organization already has a provider with this name. "
                                            "Choose another name, or edit the existing provider.")
        return cleaned

    def clean_tier_models(self):
        try:
            return provider_models_parse(self.cleaned_data.get("tier_models"))
        except InvalidInput as exc:
            raise forms.ValidationError(exc.details.get("models") or exc.message) from None


@admin.register(LLMProvider)
class LLMProviderAdmin(TenantScopedAdmin):
    tenant_path = "organization"
    form = LLMProviderForm
    list_display = ["provider_name", "organization", "priority", "enabled", "has_api_key", "created_at"]
    list_filter = ["enabled", "provider_name", "organization"]
    search_fields = ["provider_name", "base_url", "organization__name"]

    @admin.display(boolean=True, description="API key set")
    def has_api_key(self, obj) -> bool:
        return bool(obj.api_key_encrypted)

    def save_model(self, request, obj, form, change):
        if form.cleaned_data.get("clear_api_key"):
            obj.api_key_encrypted = ""
        elif form.cleaned_data.get("api_key"):
            obj.api_key_encrypted = encrypt_text(form.cleaned_data["api_key"])
        super().save_model(request, obj, form, change)


class SessionMessageInline(ScopedInlineMixin, admin.TabularInline):
    model = SessionMessage
    fk_name = "session"
    fields = ["sequence", "role", "state", "agent", "execution", "content", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Session)
class SessionAdmin(ViewOnlyTenantScopedAdmin):
    """Sessions are written through their services (docs/sessions.md); the admin views them."""

    tenant_path = "workspace__organization"

    list_display = ["id", "title", "agent", "workspace", "created_by", "active_execution", "archived_at", "updated_at"]
    list_filter = ["workspace"]
    search_fields = ["id", "title", "agent__name", "created_by__username"]
    raw_id_fields = ["active_execution"]
    list_select_related = ["agent", "workspace", "created_by", "active_execution"]
    inlines = [SessionMessageInline]

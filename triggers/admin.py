"""Triggers in the Django admin: read their firings, edit what is safe to edit.

Triggers are created through the API (a trigger needs a run-as identity whose role is
checked against its creator's); here an operator may rename, enable or disable a
trigger and edit its prompt and configuration, validated exactly as the API validates
them, with messages that say what to write. Firings are a log: read-only.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin

from rivercore.errors import InvalidInput, RiverError
from tenancy.admin_scoping import (
    ScopedInlineMixin,
    TenantScopedAdmin,
    TenantScopedAdminMixin,
    ViewOnlyTenantScopedAdmin,
)
from triggers.models import ApiKey, MetricSample, PipelineHandoff, Trigger, TriggerFiring, WebhookEndpoint
from triggers.prompt import PromptTemplateError, prompt_validate
from triggers.types import config_public

CONFIG_HELP = {
    "scheduled": 'When to run, as a cron line and a time zone: {"cron": "0 8 * * 1-5", "timezone": '
                 '"Europe/Berlin"} runs at 8:00 Berlin time, Monday to Friday (minute, hour, day of month, '
                 'month, day of week).',
    "event": 'For example {"endpoint": "zendesk", "event_type": "ticket.created", '
             '"condition": "payload.priority == \'high\'"}.',
    "api": 'For example {"input_schema": {"type": "object"}, "rate_limit_per_minute": 60}.',
    "threshold": 'For example {"expression": "cpu_percent > 90 for 5m", "cooldown_seconds": 900}.',
    "workflow": 'For example {"upstream_agent": "<agent id>", "on_statuses": ["completed"]}.',
    "manual": "Manual triggers take no settings: {}.",
}


def _field_label(path: str) -> str:
    return path.removeprefix("config.").replace("_", " ") or "settings"


class TriggerAdminForm(forms.ModelForm):
    config = forms.JSONField(help_text="The settings of this trigger's type, as JSON.")

    class Meta:
        model = Trigger
        fields = ["name", "enabled", "prompt", "config"]
        help_texts = {
            "name": "How people will recognise this trigger in the run list, e.g. \"Weekday 8 am report\".",
            "enabled": "Untick to stop this trigger from starting runs; a schedule stops firing at once.",
            "prompt": "What the agent is asked when the trigger fires. {{ payload.ticket.subject }} puts in "
                      "a value from the event that fired it; nothing else in double braces is allowed.",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance and self.instance.pk:
            self.initial["config"] = config_public(self.instance.config)
            self.fields["config"].help_text = CONFIG_HELP.get(self.instance.type, "")

    def clean_prompt(self):
        prompt = self.cleaned_data.get("prompt", "")
        try:
            return prompt_validate(prompt)
        except PromptTemplateError as exc:
            raise forms.ValidationError(f"The prompt has a placeholder River cannot fill: {exc}.") from None

    def clean_name(self):
        from triggers.services import trigger_name_check

        try:
            return trigger_name_check(workspace=self.instance.workspace, name=self.cleaned_data.get("name", ""),
                                      exclude=self.instance.pk)
        except InvalidInput as exc:
            raise forms.ValidationError(exc.details.get("name", [exc.message])) from None

    def clean_config(self):
        from triggers.services import trigger_config_check

        raw = self.cleaned_data.get("config")
        try:
            parsed = trigger_config_check(trigger_type=self.instance.type, config=raw,
                                          workspace=self.instance.workspace, agent=self.instance.agent)
        except InvalidInput as exc:
            lines = [f"{_field_label(path).capitalize()}: {'; '.join(messages)}"
                     for path, messages in (exc.details or {}).items()]
            raise forms.ValidationError(lines or [exc.message]) from None
        return parsed.model_dump(mode="json")

    def changes(self) -> dict:
        return {name: self.cleaned_data[name] for name in self.changed_data if name in self.cleaned_data}

    def clean(self):
        """The API's rule: nobody changes a trigger that acts with a role above their
        own (only disabling it is open to all who may edit it)."""
        from triggers.services import trigger_change_authority_check

        data = super().clean()
        actor = getattr(self, "actor", None)
        if actor is not None and self.instance.pk and self.changed_data:
            try:
                trigger_change_authority_check(actor=actor, trigger=self.instance, changes=self.changes())
            except RiverError as exc:
                details = exc.details.get("run_as_role", []) if isinstance(exc.details, dict) else []
                raise forms.ValidationError([exc.message, *details]) from None
        return data


class FiringInline(ScopedInlineMixin, admin.TabularInline):
    model = TriggerFiring
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ["-fired_at", "-id"]
    fields = ["fired_at", "source", "outcome", "reason", "detail", "execution", "dedupe_key", "payload_bytes"]
    readonly_fields = fields
    show_change_link = True

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("execution")

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Trigger)
class TriggerAdmin(TenantScopedAdmin):
    tenant_path = "workspace__organization"
    form = TriggerAdminForm
    list_display = ["name", "agent", "workspace", "type", "enabled", "run_as_identity", "created_at"]
    list_filter = ["type", "enabled", "workspace"]
    search_fields = ["name", "agent__name"]
    readonly_fields = ["workspace", "agent", "type", "run_as_identity", "created_by", "created_at", "updated_at"]
    inlines = [FiringInline]

    def get_fields(self, request, obj=None):
        return ["name", "enabled", "workspace", "agent", "type", "prompt", "config", "run_as_identity",
                "created_by", "created_at", "updated_at"]

    list_select_related = ["agent", "workspace", "run_as__user"]

    def get_queryset(self, request):
        from django.db.models import OuterRef, Subquery

        from tenancy.models import Membership

        run_as_role = Membership.objects.filter(user_id=OuterRef("run_as__user_id")).order_by("pk").values("role")[:1]
        return super().get_queryset(request).annotate(run_as_role=Subquery(run_as_role))

    @admin.display(description="Runs as")
    def run_as_identity(self, obj) -> str:
        return f"{obj.run_as.user.username} ({getattr(obj, 'run_as_role', None) or 'no role'})"

    def has_add_permission(self, request) -> bool:
        return False  # through the API: the run-as role is checked against its creator

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"actor": request.user})

    def save_model(self, request, obj, form, change):
        """Through ``trigger_update``, as the API: the same checks, the re-binding to
        the person who changed it, and its beat entry kept in step."""
        from triggers.services import trigger_update

        changes = form.changes()
        if changes:
            updated = trigger_update(actor=request.user, trigger=obj, **changes)
            obj.refresh_from_db()
            obj.run_as = updated.run_as

    def delete_model(self, request, obj):
        from triggers.services import trigger_delete

        trigger_delete(trigger=obj)  # with its beat entry and its run-as identity

    def delete_queryset(self, request, queryset):
        for trigger in queryset:
            self.delete_model(request, trigger)


@admin.register(TriggerFiring)
class TriggerFiringAdmin(ViewOnlyTenantScopedAdmin):
    tenant_path = "trigger__workspace__organization"
    list_display = ["fired_at", "trigger", "source", "outcome", "reason", "execution", "payload_bytes"]
    list_filter = ["outcome", "reason", "trigger__type"]
    search_fields = ["trigger__name", "dedupe_key", "source"]
    list_select_related = ["trigger", "execution"]
    readonly_fields = ["trigger", "fired_at", "source", "outcome", "reason", "detail", "execution", "dedupe_key",
                       "payload_bytes"]
    fields = readonly_fields


class _ReadOnlyAdmin(TenantScopedAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(MetricSample)
class MetricSampleAdmin(_ReadOnlyAdmin):
    """Samples sent to /api/v1/metrics/ for threshold triggers (pruned after the retention)."""

    tenant_path = "workspace__organization"
    list_display = ["ts", "workspace", "name", "value", "labels", "received_at"]
    list_filter = ["workspace"]
    search_fields = ["name"]
    date_hierarchy = "ts"
    show_full_result_count = False


@admin.register(PipelineHandoff)
class PipelineHandoffAdmin(_ReadOnlyAdmin):
    """Hand-offs from a run's end to the workflow triggers that follow it; a pending one
    (not done) is retried by the beat task triggers.pipeline_handoffs_retry."""

    tenant_path = "trigger__workspace__organization"
    list_display = ["id", "upstream_execution", "trigger", "depth", "attempts", "done_at", "firing", "last_error"]
    list_filter = [("done_at", admin.EmptyFieldListFilter)]
    list_select_related = ["trigger", "firing", "upstream_execution"]
    readonly_fields = ["trigger", "upstream_execution", "payload", "depth", "created_at", "attempts",
                       "next_attempt_at", "last_error", "done_at", "firing"]
    fields = readonly_fields

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    """Keys are issued through the API (shown once there); here they are listed and
    revoked. The digest is never shown."""

    tenant_path = "organization"
    list_display = ["name", "prefix", "organization", "workspace", "rate_limit_per_minute", "created_at",
                    "last_used_at", "revoked_at"]
    list_select_related = ["organization", "workspace"]
    list_filter = ["organization"]
    search_fields = ["name", "prefix"]
    fields = ["name", "prefix", "organization", "workspace", "rate_limit_per_minute", "created_by", "created_at",
              "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "organization", "workspace", "created_by", "created_at", "last_used_at",
                       "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        from triggers.apikeys import api_key_revoke

        for key in queryset:
            api_key_revoke(key=key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).")


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(TenantScopedAdmin):
    """Endpoints without their secrets: create, rotate and change the scheme through the
    API or the trigger pages, which show a River-made secret once (a change of scheme
    always comes with a new secret, which this admin has no safe place to show)."""

    tenant_path = "workspace__organization"
    list_display = ["slug", "workspace", "scheme", "id", "created_at", "rotated_at", "previous_secret_expires_at"]
    list_filter = ["scheme", "workspace"]
    search_fields = ["slug"]
    fields = ["id", "slug", "workspace", "scheme", "created_by", "created_at", "rotated_at",
              "previous_secret_expires_at"]
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False


# django-celery-beat's own tables: River's schedules are scheduled triggers, edited on the
# trigger (its settings hold the cron and time zone) and kept in step by schedule_sync.
# The raw beat rows (trigger:<id> and River's maintenance tasks) belong to no single
# organization: superusers only.
def _beat_admins_scoped() -> None:
    from django_celery_beat.models import (
        ClockedSchedule,
        CrontabSchedule,
        IntervalSchedule,
        PeriodicTask,
        SolarSchedule,
    )

    for model in (PeriodicTask, CrontabSchedule, IntervalSchedule, SolarSchedule, ClockedSchedule):
        registered = admin.site._registry.get(model)
        if registered is None or isinstance(registered, TenantScopedAdminMixin):
            continue
        admin.site.unregister(model)
        scoped = type(f"Scoped{type(registered).__name__}", (TenantScopedAdminMixin, type(registered)),
                      {"tenant_path": None, "__module__": __name__})
        admin.site.register(model, scoped)


_beat_admins_scoped()

from django import forms
from django.contrib import admin, messages
from django.db import models

from common.formfields import BoundedJSONField
from governance.backtest_models import PolicyBacktest
from governance.backtests import backtest_queue, policy_backtest_create
from governance.models import (
    ApprovalRequest,
    AuditAnchor,
    AuditLogEntry,
    Notification,
    Policy,
    PolicyCounter,
    WorkspaceSettings,
)
from governance.services import policy_admin_delete, policy_admin_saved, policy_validate
from rivercore.errors import InvalidInput, RiverError
from rivercore.types.governance import PolicyScope
from tenancy.admin_scoping import TenantScopedAdmin, ViewOnlyTenantScopedAdmin, admin_organization_ids


class PolicyAdminForm(forms.ModelForm):
    """The API's validation, in the admin: conditions are normalised to
    ``{"expression": ...}`` and refused with the position and reason."""

    policy_type = forms.ChoiceField(
        choices=[("", "Infer from the condition")] + Policy._meta.get_field("policy_type").choices, required=False,
        help_text="What kind of limit this is. Leave on \"Infer from the condition\" and River picks it "
                  "from the names the condition uses.",
    )

    class Meta:
        model = Policy
        fields = ["organization", "workspace", "scope", "name", "description", "policy_type", "conditions",
                  "enforcement", "enabled"]
        field_classes = {"conditions": BoundedJSONField}
        help_texts = {
            "organization": "The organization this rule belongs to.",
            "scope": "Organization: the rule applies in every workspace of the organization. "
                     "Workspace: only in the workspace chosen below.",
            "workspace": "Only for a workspace rule. Leave empty for an organization-wide rule.",
            "name": "A short name people will recognise in approvals and the audit log, "
                    "e.g. \"Cap tokens per run\".",
            "description": "Why the rule exists, for the next person who reads it.",
            "conditions": 'When the rule applies, e.g. {"expression": "cost.tokens > 5000"} or '
                          '{"expression": "tool.name == \'send_email\' AND time.hour >= 18"}. '
                          "River checks it before each action an agent takes; names it does not "
                          "know are refused when you save.",
            "enforcement": "What happens when the condition holds: Block stops the action; Require "
                           "approval pauses the run until a person approves; Warn lets it through "
                           "with a warning; Log only records it.",
            "enabled": "Untick to switch the rule off without deleting it.",
        }

    def clean(self):
        cleaned = super().clean()
        scope, organization, workspace = cleaned.get("scope"), cleaned.get("organization"), cleaned.get("workspace")
        if scope == PolicyScope.ORGANIZATION and workspace is not None:
            self.add_error("workspace", "Leave empty for an organization-wide policy.")
        if scope == PolicyScope.WORKSPACE:
            if workspace is None:
                self.add_error("workspace", "A workspace policy needs a workspace.")
            elif organization is not None and workspace.organization_id != organization.pk:
                self.add_error("workspace", "The workspace belongs to another organization.")
        if "conditions" in cleaned:
            try:
                shape = policy_validate(
                    conditions=cleaned["conditions"], policy_type=cleaned.get("policy_type") or None
                )
            except InvalidInput as exc:
                for field, messages in exc.details.items():
                    if field == "conditions":
                        for message in messages:
                            self.add_error(field, f"River cannot use this condition ({message}). "
                                                  'Write it as {"expression": "cost.tokens > 5000"}.')
                    elif field == "policy_type":
                        for message in messages:
                            self.add_error(field, message)
            else:
                cleaned["conditions"] = shape.conditions
                cleaned["policy_type"] = shape.policy_type.value
        return cleaned


@admin.register(Policy)
class PolicyAdmin(TenantScopedAdmin):
    tenant_path = "organization"
    form = PolicyAdminForm
    list_display = ["name", "scope", "organization", "workspace", "policy_type", "enforcement", "enabled"]
    list_filter = ["scope", "policy_type", "enforcement", "enabled"]
    search_fields = ["name", "description"]
    readonly_fields = ["created_by", "created_at", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        # Scope and tenancy are fixed once created, as in the API.
        fixed = ["organization", "workspace", "scope"] if obj else []
        return [*self.readonly_fields, *fixed]

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        changed = (
            {name: {"from": form.initial.get(name), "to": form.cleaned_data.get(name)} for name in form.changed_data}
            if change
            else None
        )
        super().save_model(request, obj, form, change)
        policy_admin_saved(policy=obj, actor=request.user, created=not change, changed=changed)

    def delete_model(self, request, obj):
        policy_admin_delete(policy=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for policy in queryset:
            policy_admin_delete(policy=policy, actor=request.user)

    actions = ["backtest_policies"]

    @admin.action(description="Backtest: what each selected workspace policy decides over the last 14 days")
    def backtest_policies(self, request, queryset):
        """One backtest per workspace policy: the active set without it against the set with
        it (governance.backtests); the worker runs each, the Policy backtests list shows them."""
        for policy in queryset:
            if policy.workspace_id is None:
                self.message_user(request, f"{policy.name}: an organization policy is backtested per workspace, "
                                           "through the API (workspace_id).", messages.WARNING)
                continue
            try:
                backtest = policy_backtest_create(actor=request.user, policy_id=policy.pk, changes={},
                                                  baseline_without=True)
            except RiverError as exc:
                self.message_user(request, f"{policy.name}: {exc.message}", messages.ERROR)
                continue
            backtest_queue(backtest=backtest)
            self.message_user(request, f"{policy.name}: backtest #{backtest.pk} started.", messages.SUCCESS)


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ViewOnlyTenantScopedAdmin):
    """Approvals are resolved through the approvals API and pages, never edited here."""

    tenant_path = "workspace__organization"
    list_display = ["tool_name", "workspace", "execution_id", "status", "expires_at", "created_at"]
    list_filter = ["status"]
    search_fields = ["tool_name"]


@admin.register(AuditLogEntry)
class AuditLogEntryAdmin(ViewOnlyTenantScopedAdmin):
    """Append-only: no add, change or delete, even for superusers. The changelist
    shows each organization's verification verdict (entries of deleted
    organizations included, by id: superusers only)."""

    tenant_path = "organization"
    list_display = ["organization_id", "seq", "event_type", "actor_label", "execution_id", "key_id", "created_at"]
    list_filter = ["event_type"]
    search_fields = ["event_type", "actor_label"]

    def changelist_view(self, request, extra_context=None):
        from governance.audit import audit_verify

        scope = None if request.user.is_superuser else sorted(admin_organization_ids(request))
        for report in audit_verify(organization_ids=scope).organizations:
            text = f"Audit trail of organization {report.organization_id}: {report.verdict} " \
                   f"({report.entries_checked} entries, {report.anchors_checked} anchors)"
            if report.ok:
                messages.success(request, text)
            else:
                messages.error(request, f"{text}. {report.detail or report.first_broken.detail}")
        return super().changelist_view(request, extra_context=extra_context)


@admin.register(AuditAnchor)
class AuditAnchorAdmin(ViewOnlyTenantScopedAdmin):
    """Checkpoints of each organization's audit chain (docs/audit.md); view only."""

    tenant_path = "organization_id"
    list_display = ["organization_id", "number", "entry_count", "key_id", "created_at"]


@admin.register(PolicyCounter)
class PolicyCounterAdmin(ViewOnlyTenantScopedAdmin):
    """Rate and budget windows, keyed by policy: superusers only."""

    tenant_path = None
    list_display = ["key", "window_start", "value"]
    search_fields = ["key"]


@admin.register(WorkspaceSettings)
class WorkspaceSettingsAdmin(TenantScopedAdmin):
    tenant_path = "workspace__organization"
    # approval_notification_config is validated by its pydantic schema on clean.
    list_display = ["workspace", "updated_at"]
    formfield_overrides = {models.JSONField: {"form_class": BoundedJSONField}}


@admin.register(Notification)
class NotificationAdmin(TenantScopedAdmin):
    tenant_path = "workspace__organization"
    list_display = ["title", "user", "workspace", "kind", "read_at", "created_at"]
    list_filter = ["kind"]
    search_fields = ["title", "user__username"]


@admin.register(PolicyBacktest)
class PolicyBacktestAdmin(ViewOnlyTenantScopedAdmin):
    """Backtests are started from the policy page, the API or the Policy list's action;
    here they are read (docs/changing-safely.md)."""

    tenant_path = "workspace__organization"
    list_display = ["id", "kind", "workspace", "status", "progress", "days", "summary", "created_at"]
    list_filter = ["kind", "status"]

    @admin.display(description="Result")
    def summary(self, obj: PolicyBacktest) -> str:
        result = obj.result or {}
        if obj.kind == PolicyBacktest.Kind.POLICY and result:
            return (f"{result.get('runs_considered', 0)} runs: would block {result.get('would_block', 0)}, "
                    f"approvals {result.get('approvals_added', 0):+d}")
        if result:
            return (f"auto-approves {result.get('approved_auto', 0)}/{result.get('approved', 0)} approved, "
                    f"{result.get('rejected_auto', 0)}/{result.get('rejected', 0)} rejected")
        return obj.error or ""

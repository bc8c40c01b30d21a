from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from common.fields import PydanticJSONField
from governance.types import ApprovalNotificationConfig, Enforcement, PolicyScope, PolicyType


def _choices(enum) -> list[tuple[str, str]]:
    return [(member.value, member.value.replace("_", " ").capitalize()) for member in enum]


class Policy(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.CASCADE, related_name="policies")
    workspace = models.ForeignKey(
        "tenancy.Workspace", null=True, blank=True, on_delete=models.CASCADE, related_name="policies"
    )
    scope = models.CharField(max_length=20, choices=_choices(PolicyScope))
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    policy_type = models.CharField(max_length=30, choices=_choices(PolicyType))
    # {"expression": "..."}; the keyed form of the spec is normalised into this on save.
    conditions = models.JSONField(default=dict)
    enforcement = models.CharField(max_length=20, choices=_choices(Enforcement))
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "policies"
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(scope="organization", workspace__isnull=True))
                | (models.Q(scope="workspace", workspace__isnull=False)),
                name="policy_scope_matches_workspace",
            )
        ]

    def __str__(self) -> str:
        return self.name


class ApprovalRequest(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        EDITED = "edited", "Edited and approved"
        EXPIRED = "expired", "Expired"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="approval_requests")
    # Plain ids, not foreign keys: governance sits below agents and executions.
    execution_id = models.BigIntegerField(db_index=True)
    agent_id = models.UUIDField(null=True, blank=True)
    tool_name = models.CharField(max_length=100)
    tool_call_id = models.CharField(max_length=100, blank=True)
    proposed_payload = models.JSONField(default=dict)
    reasoning_summary = models.TextField(blank=True)
    risk_context = models.TextField(blank=True)
    confidence_score = models.FloatField(null=True, blank=True)
    auto_approve_eligible = models.BooleanField(default=False)
    approver_roles = models.JSONField(default=list)
    # Who started the run (its requester, whether signed in or through one of their
    # API tokens). Segregation of duties: this person may not resolve the request
    # unless the workspace allows self-approval. Null for runs nobody started
    # (a trigger without a user), which any approver may resolve.
    run_started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    expires_at = models.DateTimeField()
    reminder_sent_at = models.DateTimeField(null=True, blank=True)
    resolution = models.JSONField(default=dict, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolution_comment = models.TextField(blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "expires_at"]), models.Index(fields=["workspace", "status"])]

    def __str__(self) -> str:
        return f"{self.tool_name} for run {self.execution_id} ({self.status})"


class AuditLogEntry(models.Model):
    """Append-only and hash-chained per organization (see governance.audit)."""

    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="audit_entries")
    workspace = models.ForeignKey("tenancy.Workspace", null=True, blank=True, on_delete=models.PROTECT)
    seq = models.PositiveBigIntegerField()
    event_type = models.CharField(max_length=60, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT)
    actor_label = models.CharField(max_length=200, blank=True)
    execution_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    agent_id = models.UUIDField(null=True, blank=True)
    policy_id = models.UUIDField(null=True, blank=True)
    approval_id = models.UUIDField(null=True, blank=True)
    details = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    prev_hash = models.CharField(max_length=64)
    entry_hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["organization", "seq"]
        verbose_name_plural = "audit log entries"
        constraints = [models.UniqueConstraint(fields=["organization", "seq"], name="uniq_audit_seq")]

    def __str__(self) -> str:
        return f"#{self.seq} {self.event_type}"


class WorkspaceSettings(models.Model):
    workspace = models.OneToOneField("tenancy.Workspace", on_delete=models.CASCADE, related_name="governance_settings")
    approval_notification_config = PydanticJSONField(schema=ApprovalNotificationConfig, default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "workspace settings"

    def __str__(self) -> str:
        return f"settings of {self.workspace}"


class Notification(models.Model):
    """An in-app notification for one user."""

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="notifications")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=50)
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=500, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.title


class PolicyCounter(models.Model):
    """A fixed-window counter behind rate and budget policies, bumped atomically."""

    key = models.CharField(max_length=200)
    window_start = models.DateTimeField()
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "window_start"], name="uniq_policy_counter")]

    def __str__(self) -> str:
        return f"{self.key}@{self.window_start:%Y-%m-%d %H:%M} = {self.value}"

"""The stored backtest: one row per request, its progress and its result.

A backtest re-decides recorded tool calls (a policy backtest) or recorded approval
decisions (an auto-approve backtest) and never touches a data source or a model; its
row is claimed by one worker with a compare-and-set (``governance.backtests``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class PolicyBacktest(models.Model):
    class Kind(models.TextChoices):
        POLICY = "policy", "Policy"
        AUTO_APPROVE = "auto_approve", "Auto-approve conditions"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="policy_backtests")
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.POLICY)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)  # percent
    days = models.PositiveSmallIntegerField(default=14)
    # What is tried: governance.backtests.PolicyProposal or AutoApproveProposal as JSON.
    proposal = models.JSONField(default=dict)
    # The policy the proposal changes (a plain id, null for a new policy), and the agent of
    # an auto-approve backtest (plain id: governance sits below agents).
    policy_id = models.UUIDField(null=True, blank=True)
    agent_id = models.UUIDField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)
    error = models.CharField(max_length=500, blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    # The window's end: runs and decisions recorded before this instant are considered.
    window_end = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    # A running backtest whose lease has passed (its worker died) may be claimed again.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["workspace", "-created_at"], name="backtest_ws_created_idx")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} backtest #{self.pk} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

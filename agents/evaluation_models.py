"""Evaluating an agent version against what people decided, the workspace's promotion
gate, and the runs pinned to an agent as its test set (docs/changing-safely.md).

Imported by ``agents.models`` so Django registers them with the agents app. A run is
referred to by its id (as ``AgentMemory`` does): runs belong to ``executions``, a layer
above this one.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

SCORE_NAMES = ("approvals", "rejections", "edits")


class Evaluation(models.Model):
    """One evaluation of a version: its progress while it runs, then its scores. The
    rows of its runs are ``EvaluationRun``s, appended one per replayed run."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="evaluations")
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="evaluations")
    version = models.ForeignKey("agents.AgentVersion", on_delete=models.CASCADE, related_name="evaluations")
    days = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    runs_total = models.PositiveIntegerField(default=0)
    runs_done = models.PositiveIntegerField(default=0)
    # {"approvals": 0.75 | None, "rejections": ..., "edits": ...} once done.
    scores = models.JSONField(default=dict, blank=True)
    # The counts behind the scores and the other totals (see docs/changing-safely.md).
    totals = models.JSONField(default=dict, blank=True)
    error = models.CharField(max_length=500, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["version", "status", "-finished_at"], name="evaluation_version_idx")]

    def __str__(self) -> str:
        return f"evaluation of {self.version} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)


class EvaluationRun(models.Model):
    """What the evaluated version would have done on one recorded run."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="runs")
    position = models.PositiveIntegerField()
    execution_id = models.BigIntegerField()
    pinned = models.CharField(max_length=10, blank=True)  # the test-set label, "" when not pinned
    row = models.JSONField(default=dict)

    class Meta:
        ordering = ["evaluation", "position"]
        constraints = [models.UniqueConstraint(fields=["evaluation", "position"], name="uniq_evaluation_run")]

    def __str__(self) -> str:
        return f"{self.evaluation_id} #{self.position}: run {self.execution_id}"


class PromotionGate(models.Model):
    """A workspace's minimum scores for deploying a version. A minimum left empty is
    not checked; with none set there is no gate."""

    workspace = models.OneToOneField("tenancy.Workspace", on_delete=models.CASCADE, related_name="promotion_gate")
    min_approvals = models.DecimalField(
        max_digits=4, decimal_places=3, null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(1)]
    )
    min_rejections = models.DecimalField(
        max_digits=4, decimal_places=3, null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(1)]
    )
    min_edits = models.DecimalField(
        max_digits=4, decimal_places=3, null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(1)]
    )
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"promotion gate of {self.workspace_id}"

    def minimums(self) -> dict[str, float]:
        """The minimums that are set, by score name."""
        found = {name: getattr(self, f"min_{name}") for name in SCORE_NAMES}
        return {name: float(value) for name, value in found.items() if value is not None}


class TestSetPin(models.Model):
    """A run pinned to an agent as a good or bad example: every evaluation of the agent
    replays it, first."""

    __test__ = False  # not a pytest class, whatever its name

    class Label(models.TextChoices):
        GOOD = "good", "Good example"
        BAD = "bad", "Bad example"

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="test_set")
    execution_id = models.BigIntegerField()
    label = models.CharField(max_length=10, choices=Label.choices)
    note = models.CharField(max_length=500, blank=True)
    pinned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["agent", "created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["agent", "execution_id"], name="uniq_test_set_pin")]

    def __str__(self) -> str:
        return f"run {self.execution_id} pinned to {self.agent_id} ({self.label})"

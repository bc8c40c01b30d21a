from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from common.fields import PydanticJSONField
from rivercore.types.agents import (
    ActionLevel,
    ApprovalRules,
    BusinessFunction,
    GovernanceLevel,
    ModelConfig,
    NotificationConfig,
    Tier,
)


def _choices(enum) -> list[tuple[str, str]]:
    return [(member.value, member.value.replace("_", " ").capitalize()) for member in enum]


class Agent(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        ACTIVE = "active", "Active"
        PAUSED = "paused", "Paused"
        ARCHIVED = "archived", "Archived"

    class Health(models.TextChoices):
        HEALTHY = "healthy", "Healthy"
        DEGRADED = "degraded", "Degraded"
        CRITICAL = "critical", "Critical"
        # Not failing: its runs keep being refused by a policy (health_note names it).
        NEEDS_ATTENTION = "needs_attention", "Needs attention"

    # Legal lifecycle moves; everything else is refused with a 400.
    TRANSITIONS: dict[str, set[str]] = {
        Status.DRAFT: {Status.ACTIVE, Status.ARCHIVED},
        Status.ACTIVE: {Status.PAUSED, Status.ARCHIVED},
        Status.PAUSED: {Status.ACTIVE, Status.ARCHIVED},
        Status.ARCHIVED: set(),
    }

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    business_function = models.CharField(max_length=40, choices=_choices(BusinessFunction))
    domain = models.CharField(max_length=200, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="owned_agents")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DRAFT)
    health = models.CharField(max_length=20, choices=Health.choices, default=Health.HEALTHY)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # Runs in a row whose outcome was ``blocked`` (a policy refused what the answer needed).
    consecutive_blocked = models.PositiveIntegerField(default=0)
    health_note = models.CharField(max_length=300, blank=True, default="")
    current_version = models.ForeignKey(
        "agents.AgentVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Teams (docs/sessions.md): an agent may have a parent in its own workspace; the
    # agents without a parent are the roots a session starts at. The tree never has a
    # cycle (agents.services.agent_team_update checks it under the workspace's lock).
    parent_agent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="sub_agents"
    )
    # transfer_to_agent may not hand the conversation back up to the parent / to a sibling.
    disallow_transfer_to_parent = models.BooleanField(default=False)
    disallow_transfer_to_peers = models.BooleanField(default=False)
    # The canary running now (docs/changing-safely.md): a share of new runs use its version.
    canary = models.ForeignKey("agents.AgentCanary", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["workspace", "status"])]

    def __str__(self) -> str:
        return self.name

    def can_transition_to(self, target: str) -> bool:
        return target in self.TRANSITIONS.get(self.status, set())


class AgentVersion(models.Model):
    """A deployed configuration. Immutable once saved: change means a new version."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    goal = models.TextField()
    instructions = models.TextField()
    system_prompt = models.TextField(blank=True)
    action_level = models.CharField(max_length=30, choices=_choices(ActionLevel))
    governance_level = models.CharField(
        max_length=20, choices=_choices(GovernanceLevel), default=GovernanceLevel.STANDARD
    )
    model_config = PydanticJSONField(schema=ModelConfig, default=dict)
    tools = PydanticJSONField(schema=list[str], default=list)
    approval_rules = PydanticJSONField(schema=ApprovalRules, default=dict)
    notification_config = PydanticJSONField(schema=NotificationConfig, default=dict)
    data_sources = models.ManyToManyField("datasources.DataSource", blank=True, related_name="agent_versions")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["agent", "-version"]
        constraints = [models.UniqueConstraint(fields=["agent", "version"], name="uniq_agent_version")]

    def __str__(self) -> str:
        return f"{self.agent} v{self.version}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not kwargs.pop("_allow_update", False):
            raise ValueError("Agent versions are immutable; create a new version instead.")
        super().save(*args, **kwargs)

    @property
    def model_settings(self) -> ModelConfig:
        return ModelConfig.model_validate(self.model_config or {})

    @property
    def rules(self) -> ApprovalRules:
        return ApprovalRules.model_validate(self.approval_rules or {})


class AgentMemory(models.Model):
    """Long-term memory written after a run: summarised, never the raw log."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memories")
    execution_id = models.BigIntegerField(unique=True)
    summary = models.TextField(blank=True)
    # The summary normalised (agents.services.memory_summary_key): runs that say the same
    # thing share one memory, refreshed by the latest of them.
    summary_key = models.CharField(max_length=64, blank=True, default="")
    learnings = PydanticJSONField(schema=list[str], default=list)
    flagged_items = PydanticJSONField(schema=list[str], default=list)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "agent memories"
        indexes = [models.Index(fields=["agent", "summary_key"], name="agent_memory_key_idx")]

    def __str__(self) -> str:
        return f"memory of {self.agent_id} from run {self.execution_id}"


class WorkspaceMemory(models.Model):
    """What a workspace's runs learned, searchable by later runs (``search_memory``).

    ``user`` empty: shared by the workspace; set: personal, found only by runs that user
    started and listed only to that user. ``keywords`` holds the normalised words of the
    content, space-separated with a space at each end, so a word is matched as
    ``" word "`` on every database."""

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="memories")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="workspace_memories")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="workspace_memories")
    content = models.TextField()
    keywords = models.TextField(blank=True)
    source_execution_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "workspace memories"  # the admin's index and change list
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["workspace", "-created_at"], name="wsmemory_workspace_recent_idx")]
        constraints = [
            # One memory per run: post-processing that runs again writes nothing new.
            models.UniqueConstraint(fields=["source_execution_id"], name="uniq_wsmemory_source_execution"),
        ]

    def __str__(self) -> str:
        return f"memory {self.pk} of workspace {self.workspace_id}"

    @property
    def personal(self) -> bool:
        return self.user_id is not None


class MemoryConsent(models.Model):
    """A user's consent to personal memory in one workspace (no row: not given)."""

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="memory_consents")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_consents")
    personal = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="uniq_memory_consent")]

    def __str__(self) -> str:
        return f"memory consent of {self.user_id} in {self.workspace_id}: {self.personal}"


from agents.evaluation_models import Evaluation, EvaluationRun, PromotionGate, TestSetPin  # noqa: E402

__all__ = ["Agent", "AgentVersion", "AgentMemory", "MemoryConsent", "Tier", "WorkspaceMemory",
           "Evaluation", "EvaluationRun", "PromotionGate", "TestSetPin"]


class CanaryStatus(models.TextChoices):
    RUNNING = "running", "Running"
    PROMOTED = "promoted", "Promoted"
    STOPPED = "stopped", "Stopped"
    ROLLED_BACK = "rolled_back", "Rolled back"


class AgentCanary(models.Model):
    """A version tried on a share of an agent's new runs beside the deployed one
    (docs/changing-safely.md, "Canary and rollback"). At most one runs per agent; it ends
    promoted (its version deployed), stopped by a person, or rolled back by River when
    its runs do worse than the deployed version's beyond ``margin``."""

    Status = CanaryStatus

    PERCENT_MIN, PERCENT_MAX = 1, 50

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="canaries")
    version = models.ForeignKey(AgentVersion, on_delete=models.PROTECT, related_name="+")
    # The version deployed when the canary started: the arm it is compared with.
    base_version = models.ForeignKey(AgentVersion, on_delete=models.PROTECT, related_name="+")
    percent = models.PositiveSmallIntegerField()
    # How much worse the canary may do before it is rolled back: rate points (0.10 is ten
    # points) for the rates, a fraction of the deployed version's mean for cost and turns.
    margin = models.FloatField()
    # Finished runs (approval decisions, for the approval rates) each arm needs before a
    # figure is compared.
    min_runs = models.PositiveIntegerField()
    # With the run's id, decides its arm (agents.canary.canary_arm_draw).
    seed = models.BigIntegerField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField(default=timezone.now)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    end_reason = models.CharField(max_length=500, blank=True, default="")
    # The comparison when it ended (executions.canary.CanaryComparison as JSON).
    figures = models.JSONField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "agent canaries"
        ordering = ["-started_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["agent"], condition=models.Q(status=CanaryStatus.RUNNING),
                                    name="uniq_running_canary_per_agent"),
            models.CheckConstraint(condition=models.Q(percent__gte=1, percent__lte=50), name="canary_percent_1_50"),
        ]

    def __str__(self) -> str:
        return f"canary v{self.version.version} of {self.agent} ({self.status})"

    @property
    def is_running(self) -> bool:
        return self.status == self.Status.RUNNING


__all__ += ["AgentCanary"]

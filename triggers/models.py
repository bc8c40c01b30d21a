from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from common.fields import PydanticJSONField
from triggers.types import TriggerConfig, TriggerType, api_type_name


class Trigger(models.Model):
    """A way a run of ``agent`` starts besides a person's click: the prompt it receives
    (a ``{{ payload.x }}`` template, triggers.prompt), its type's typed ``config`` and the
    identity its runs act as (``run_as``, a workspace service principal)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="triggers")
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="triggers")
    name = models.CharField(max_length=80)  # fits a run's trigger_source ("cron:<name>")
    # The engine contract's names (``scheduled``, not the API's ``schedule``): triggers.types.
    type = models.CharField(max_length=20, choices=[(t.value, api_type_name(t).capitalize()) for t in TriggerType])
    prompt = models.TextField(blank=True)
    config = PydanticJSONField(schema=TriggerConfig, default=dict)
    enabled = models.BooleanField(default=True)
    run_as = models.OneToOneField("tenancy.ServicePrincipal", on_delete=models.PROTECT, related_name="trigger")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # Invocations by key refused before anything started (disabled, rate limited): counted
    # here, not written as a firing each, so a key holder cannot grow the firings table.
    refused_invocations = models.PositiveBigIntegerField(default=0)
    last_refused_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="uniq_trigger_name_per_workspace")]
        indexes = [models.Index(fields=["workspace", "type", "enabled"], name="trigger_ws_type_enabled")]

    def __str__(self) -> str:
        return f"{self.name} ({api_type_name(self.type)})"

    @property
    def api_type(self) -> str:
        return api_type_name(self.type)


class TriggerFiring(models.Model):
    """One attempt of a trigger to start a run: started (with its run) or skipped (with
    why). Appended, never rewritten. ``dedupe_key`` (an event id, a cron slot) is unique
    per trigger, which is what makes a redelivery or a second scheduler start nothing."""

    class Outcome(models.TextChoices):
        STARTED = "started", "Run started"
        SKIPPED = "skipped", "Skipped"

    class Reason(models.TextChoices):
        FILTERED = "filtered", "Condition did not match"
        RATE_LIMITED = "rate_limited", "Rate limited"
        COOLDOWN = "cooldown", "In cooldown"
        AGENT_INACTIVE = "agent_inactive", "Agent not active"
        DUPLICATE = "duplicate", "Duplicate delivery"
        SCHEMA_INVALID = "schema_invalid", "Payload failed the input schema"
        CYCLE = "cycle", "Pipeline cycle"
        DEPTH = "depth", "Pipeline too deep"
        DISABLED = "disabled", "Trigger disabled"
        ERROR = "error", "Error"
        MISSED = "missed", "Schedule slot missed"
        OWNER_REMOVED = "owner_removed", "Responsible person gone: trigger paused"

    id = models.BigAutoField(primary_key=True)
    trigger = models.ForeignKey(Trigger, on_delete=models.CASCADE, related_name="firings")
    fired_at = models.DateTimeField(default=timezone.now)
    source = models.CharField(max_length=100)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    reason = models.CharField(max_length=20, choices=Reason.choices, blank=True)
    detail = models.CharField(max_length=500, blank=True)
    execution = models.ForeignKey("executions.Execution", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    dedupe_key = models.CharField(max_length=200, null=True, blank=True)
    payload_bytes = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-fired_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["trigger", "dedupe_key"], name="uniq_firing_dedupe_key"),
            models.CheckConstraint(
                condition=(models.Q(outcome="started", reason="")
                           | (models.Q(outcome="skipped") & ~models.Q(reason=""))),
                name="firing_reason_iff_skipped",
            ),
        ]
        indexes = [models.Index(fields=["trigger", "-fired_at", "-id"], name="firing_trigger_latest")]

    def __str__(self) -> str:
        return f"{self.trigger_id} {self.outcome} {self.reason} at {self.fired_at:%Y-%m-%d %H:%M:%S}"


class ApiKey(models.Model):
    """A key that invokes API triggers (``X-API-Key``), issued for one workspace or for a
    whole organization. Shown once; only its prefix (for the lookup) and a SHA-256
    digest of the whole key are kept."""

    organization = models.ForeignKey("tenancy.Organization", on_delete=models.CASCADE, related_name="api_keys")
    workspace = models.ForeignKey("tenancy.Workspace", null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="api_keys", help_text="Empty: the key serves every workspace of "
                                                                     "the organization.")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    # None: the trigger's workspace setting (api_trigger_rate_limit_per_minute), read per call.
    rate_limit_per_minute = models.PositiveIntegerField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class WebhookScheme(models.TextChoices):
    """How an endpoint's deliveries are signed (triggers.webhooks verifies each)."""

    STANDARD = "standard", "Standard Webhooks"
    GITHUB = "github", "GitHub"
    STRIPE = "stripe", "Stripe"
    RIVER_LEGACY = "river_legacy", "River legacy (X-River-Signature)"


class WebhookEndpoint(models.Model):
    """Where a workspace receives events: ``POST /api/v1/hooks/<id>``. The id (random)
    is the URL; the slug (unique in the workspace) is what event triggers name; the
    scheme says how deliveries are signed. Secrets are encrypted, since verifying a
    signature needs them; during a rotation the previous secret stays valid until
    ``previous_secret_expires_at``. ``river_legacy`` exists only for endpoints made
    before the schemes: it leaves the event id and type unsigned, so no new endpoint
    may choose it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="webhook_endpoints")
    slug = models.SlugField(max_length=80)
    scheme = models.CharField(max_length=20, choices=WebhookScheme.choices, default=WebhookScheme.STANDARD)
    secret_encrypted = models.TextField()
    previous_secret_encrypted = models.TextField(blank=True)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    rotated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["slug"]
        constraints = [models.UniqueConstraint(fields=["workspace", "slug"], name="uniq_webhook_slug_per_workspace")]

    def __str__(self) -> str:
        return self.slug


class WebhookDelivery(models.Model):
    """A verified GitHub delivery's signed body, by digest. GitHub signs the body only,
    not its ``X-GitHub-Event`` or ``X-GitHub-Delivery`` headers, and sends no timestamp:
    a body seen once binds the id and type it first came with, so the same signed body
    under another id or type is refused (triggers.webhooks). Kept for
    ``GITHUB_DELIVERY_WINDOW``, then pruned."""

    id = models.BigAutoField(primary_key=True)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="+")
    body_sha256 = models.CharField(max_length=64)
    delivery_id = models.CharField(max_length=200)
    event_type = models.CharField(max_length=100)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        constraints = [models.UniqueConstraint(fields=["endpoint", "body_sha256"], name="uniq_webhook_body_digest")]
        indexes = [models.Index(fields=["endpoint", "received_at"], name="webhook_delivery_received")]

    def __str__(self) -> str:
        return f"{self.delivery_id} ({self.event_type})"


class MetricSample(models.Model):
    """One value of a metric series (``name`` + ``labels``) at ``ts``, sent to
    ``POST /api/v1/metrics/`` for threshold triggers. Pruned after
    ``RIVER_METRIC_RETENTION_HOURS`` (triggers.metrics)."""

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    value = models.FloatField()
    labels = models.JSONField(default=dict, blank=True)
    ts = models.DateTimeField()
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "name", "ts"], name="metric_ws_name_ts"),
            models.Index(fields=["ts"], name="metric_ts"),  # pruning
        ]

    def __str__(self) -> str:
        return f"{self.name}{self.labels or ''}={self.value} at {self.ts:%Y-%m-%d %H:%M:%S}"


class PipelineHandoff(models.Model):
    """The durable hand-off from an upstream run's end to a workflow trigger: written in
    the upstream run's post-processing transaction, done once ``trigger_fire`` recorded a
    firing for it (started or skipped). Pending rows are retried (triggers.pipelines)."""

    id = models.BigAutoField(primary_key=True)
    trigger = models.ForeignKey(Trigger, on_delete=models.CASCADE, related_name="handoffs")
    upstream_execution = models.ForeignKey("executions.Execution", on_delete=models.CASCADE, related_name="+")
    payload = models.JSONField(default=dict)
    depth = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.CharField(max_length=500, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)
    firing = models.ForeignKey(TriggerFiring, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["trigger", "upstream_execution"],
                                               name="uniq_handoff_per_upstream_run")]
        indexes = [models.Index(fields=["next_attempt_at"], condition=models.Q(done_at__isnull=True),
                                name="handoff_pending")]

    def __str__(self) -> str:
        return f"run {self.upstream_execution_id} -> {self.trigger_id} ({'done' if self.done_at else 'pending'})"

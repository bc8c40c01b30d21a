from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from common.fields import PydanticJSONField
from triggers.types import TriggerConfig, TriggerType


class Trigger(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="triggers")
    name = models.CharField(max_length=200)
    trigger_type = models.CharField(max_length=20, choices=[(t.value, t.value.capitalize()) for t in TriggerType])
    config = PydanticJSONField(schema=TriggerConfig, default=dict)
    enabled = models.BooleanField(default=True)
    # Webhook HMAC secret: encrypted (it must be read back to verify signatures).
    webhook_secret_encrypted = models.TextField(blank=True, default="")
    # API key: only a prefix and a SHA-256 digest are stored.
    api_key_prefix = models.CharField(max_length=16, blank=True, db_index=True)
    api_key_digest = models.CharField(max_length=64, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.trigger_type})"

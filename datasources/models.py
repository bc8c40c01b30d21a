from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from common.fields import PydanticJSONField
from rivercore.types.datasources import ConnectionConfig, TableInfo


class DataSource(models.Model):
    class Type(models.TextChoices):
        POSTGRESQL = "postgresql", "PostgreSQL"
        SQLITE = "sqlite", "SQLite"

    class AccessLevel(models.TextChoices):
        READ_ONLY = "read_only", "Read only"
        READ_WRITE = "read_write", "Read and write"

    class Status(models.TextChoices):
        UNTESTED = "untested", "Untested"
        CONNECTED = "connected", "Connected"
        ERROR = "error", "Error"

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="data_sources")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    type = models.CharField(max_length=20, choices=Type.choices)
    connection_config = PydanticJSONField(schema=ConnectionConfig, default=dict)
    # Fernet ciphertext of a JSON object (user, password, ...). Never decrypted for output.
    credentials_encrypted = models.TextField(blank=True, default="")
    access_level = models.CharField(max_length=20, choices=AccessLevel.choices, default=AccessLevel.READ_ONLY)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.UNTESTED)
    status_message = models.CharField(max_length=500, blank=True)
    # Table name -> classification (e.g. "pii"), used by data export policies.
    classifications = PydanticJSONField(schema=dict[str, str], default=dict, blank=True)
    schema_cache = PydanticJSONField(schema=list[TableInfo], default=list, blank=True)
    schema_discovered_at = models.DateTimeField(null=True, blank=True)
    # Limits of this source; null inherits the workspace's value (tenancy.Workspace).
    query_row_limit = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(100_000)]
    )
    observation_byte_limit = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1024), MaxValueValidator(1_048_576)]
    )
    query_timeout_seconds = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(300)]
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="uniq_data_source_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def has_credentials(self) -> bool:
        return bool(self.credentials_encrypted)

    @property
    def effective_row_limit(self) -> int:
        return self.query_row_limit or self.workspace.query_row_limit

    @property
    def effective_byte_limit(self) -> int:
        """The source's own limit, never above its workspace's (which bounds every observation)."""
        workspace_limit = self.workspace.observation_byte_limit
        return min(self.observation_byte_limit or workspace_limit, workspace_limit)

    @property
    def effective_timeout_ms(self) -> int:
        """``connection_config.statement_timeout_ms`` if set, else the source's or workspace's seconds."""
        configured = (self.connection_config or {}).get("statement_timeout_ms")
        if configured:
            return int(configured)
        return 1000 * (self.query_timeout_seconds or self.workspace.query_timeout_seconds)

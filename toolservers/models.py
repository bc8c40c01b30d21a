"""MCP servers a workspace registered and the tools they offer (docs/mcp.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ToolServer(models.Model):
    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (a local command)"
        HTTP = "http", "Streamable HTTP"
        A2A = "a2a", "A remote A2A agent"

    class Health(models.TextChoices):
        UNKNOWN = "unknown", "Not checked yet"
        OK = "ok", "Answering"
        ERROR = "error", "Failing"

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="tool_servers")
    name = models.CharField(max_length=40)
    transport = models.CharField(max_length=10, choices=Transport.choices)
    command = models.CharField(max_length=500, blank=True)  # one of RIVER_MCP_STDIO_COMMANDS
    # url: the MCP endpoint (http), or the remote agent's base or card URL (a2a).
    args = models.JSONField(default=list, blank=True)
    url = models.CharField(max_length=500, blank=True)
    # Fernet ciphertext of the env (stdio) or headers (http, a2a) object. Never decrypted for output.
    secrets_encrypted = models.TextField(blank=True, default="")
    secret_names = models.JSONField(default=list, blank=True)  # the keys, shown; the values never are
    health = models.CharField(max_length=10, choices=Health.choices, default=Health.UNKNOWN)
    health_message = models.CharField(max_length=500, blank=True)
    health_checked_at = models.DateTimeField(null=True, blank=True)
    discovered_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="uniq_tool_server_name")]

    def __str__(self) -> str:
        return self.name


class McpTool(models.Model):
    class ActionClass(models.TextChoices):
        READ = "read", "Read"
        WRITE = "write", "Write"

    server = models.ForeignKey(ToolServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=54)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict, blank=True)
    annotations = models.JSONField(default=dict, blank=True)  # the server's hints: suggestions only
    digest = models.CharField(max_length=64)  # sha256 of the description and input schema as listed now
    present = models.BooleanField(default=True)  # listed by the server's last discovery
    # The review: what an admin saw and decided. A tool is usable only while the
    # digest it was reviewed at is the digest it has now.
    action_class = models.CharField(max_length=5, choices=ActionClass.choices, blank=True)
    enabled = models.BooleanField(default=False)
    reviewed_digest = models.CharField(max_length=64, blank=True)
    reviewed_description = models.TextField(blank=True)
    reviewed_schema = models.JSONField(null=True, blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(null=True, blank=True)  # when discovery found it differs from its review
    discovered_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="uniq_mcp_tool_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def reviewed(self) -> bool:
        return bool(self.action_class) and self.reviewed_digest == self.digest

    @property
    def changed(self) -> bool:
        """Reviewed once, and differs now from what was reviewed (a "rug pull")."""
        return bool(self.reviewed_digest) and self.reviewed_digest != self.digest

    @property
    def usable(self) -> bool:
        return self.present and self.enabled and self.reviewed

    @property
    def state(self) -> str:
        if not self.present:
            return "gone"
        if self.changed:
            return "changed"
        if not self.reviewed:
            return "unreviewed"
        return "enabled" if self.enabled else "disabled"

    @property
    def suggested_class(self) -> str:
        """The class the server's hints suggest. ``read`` only when the server says it
        is read-only and not destructive; an admin still decides."""
        hints = self.annotations or {}
        if hints.get("readOnlyHint") is True and hints.get("destructiveHint") is not True:
            return self.ActionClass.READ
        return self.ActionClass.WRITE

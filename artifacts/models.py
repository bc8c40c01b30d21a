from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from common.fields import PydanticJSONField


class Artifact(models.Model):
    """A file of a workspace: uploaded by a person or an API client, or written by a run.

    The bytes live in the ``artifacts`` storage under ``storage_name`` (a generated,
    workspace-scoped name; the client's file name is kept in ``name`` as metadata only).
    Each upload of the same ``name`` in a workspace is a new row with the next
    ``version``; rows are never rewritten. A tabular file (CSV, TSV, spreadsheet) is also
    imported into a SQLite database registered as ``data_source``, one table per sheet."""

    class Kind(models.TextChoices):
        CSV = "csv", "CSV"
        TSV = "tsv", "TSV"
        XLSX = "xlsx", "Spreadsheet (xlsx)"
        JSON = "json", "JSON"
        TEXT = "text", "Plain text"
        MARKDOWN = "markdown", "Markdown"

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="artifacts")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    content_type = models.CharField(max_length=100)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    version = models.PositiveIntegerField()
    storage_name = models.CharField(max_length=500)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The run that wrote it (save_artifact), or null for an upload. A plain id, as in the
    # audit trail: the executions app sits above this one.
    created_by_execution_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    # The conversation the file was sent in (a string reference: no import of the
    # executions app, which sits above this one). The upload checks it is the
    # uploader's session in the same workspace (``artifact_session_check``).
    session = models.ForeignKey("executions.Session", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="artifacts")
    data_source = models.ForeignKey(
        "datasources.DataSource", null=True, blank=True, on_delete=models.SET_NULL, related_name="artifacts"
    )
    # The imported SQLite file, relative to the workspace's SQLite directory; what
    # deleting the artifact removes (never the data source's current path, which an
    # editor could point elsewhere).
    database_path = models.CharField(max_length=300, blank=True)
    tables = PydanticJSONField(schema=list[str], default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name", "version"], name="uniq_artifact_version"),
        ]
        indexes = [models.Index(fields=["workspace", "name", "-version"], name="artifact_latest")]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"

    @property
    def table(self) -> str | None:
        """The table an agent queries (the first sheet's for a spreadsheet); None for
        files that are not tables."""
        return self.tables[0] if self.tables else None

    @property
    def is_tabular(self) -> bool:
        return self.kind in {self.Kind.CSV, self.Kind.TSV, self.Kind.XLSX}

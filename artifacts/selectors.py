"""Reads of artifacts, always scoped to a user or a workspace (another tenant's: 404)."""

from __future__ import annotations

import logging
from typing import Any

from django.core.files.storage import storages
from django.db.models import QuerySet

from artifacts.errors import ArtifactStorageUnavailable
from artifacts.models import Artifact
from rivercore.attachments import ATTACHED_FILE_PREFIX
from rivercore.errors import InvalidInput, NotFound
from tenancy.selectors import workspaces_for_user

logger = logging.getLogger(__name__)

STORAGE_ALIAS = "artifacts"
PIPELINE_REFS = 20  # artifact references a pipeline hand-off carries at most


def artifact_storage():
    """The ``artifacts`` storage backend (settings.STORAGES; docs/artifacts.md)."""
    return storages[STORAGE_ALIAS]


def _id(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    return int(value)


def artifacts_for_user(*, user) -> QuerySet[Artifact]:
    """Every artifact in the workspaces the user belongs to (or administers)."""
    return Artifact.objects.filter(workspace__in=workspaces_for_user(user=user)).select_related("workspace")


def artifact_get_for_user(*, user, artifact_id: Any) -> Artifact:
    try:
        return artifacts_for_user(user=user).get(pk=_id(artifact_id))
    except (Artifact.DoesNotExist, TypeError, ValueError, OverflowError):
        raise NotFound("Artifact not found.") from None


def artifacts_in_workspace(*, workspace_id: int) -> QuerySet[Artifact]:
    return Artifact.objects.filter(workspace_id=workspace_id)


def artifact_get_in_workspace(*, workspace_id: int, artifact_id: Any) -> Artifact:
    """The artifact if it belongs to ``workspace_id``; else 404 (tools resolve ids here)."""
    try:
        return artifacts_in_workspace(workspace_id=workspace_id).get(pk=_id(artifact_id))
    except (Artifact.DoesNotExist, TypeError, ValueError, OverflowError):
        raise NotFound(f"Artifact {str(artifact_id)[:40]} not found.") from None


def artifact_get_by_name(*, workspace_id: int, name: str, version: int | None = None) -> Artifact:
    """The latest version of the workspace's artifact called ``name`` (or that version)."""
    rows = artifacts_in_workspace(workspace_id=workspace_id).filter(name=name)
    if version is not None:
        rows = rows.filter(version=version)
    found = rows.order_by("-version").first()
    if found is None:
        raise NotFound(f"No artifact named {name[:200]!r}{f' version {version}' if version else ''}.")
    return found


def artifacts_attachable(*, workspace_id: int, artifact_ids: list[Any], field: str = "artifacts") -> list[Artifact]:
    """The artifacts a run is started with: each id must be one of the workspace's
    (another workspace's id reads exactly like one that does not exist)."""
    try:
        wanted = list(dict.fromkeys(_id(value) for value in artifact_ids))
    except (TypeError, ValueError, OverflowError):
        raise InvalidInput(f"{field} must be a list of artifact ids.", details={field: ["ids are integers"]}) from None
    found = {a.pk: a for a in artifacts_in_workspace(workspace_id=workspace_id).filter(pk__in=wanted)}
    missing = [pk for pk in wanted if pk not in found]
    if missing:
        listed = ", ".join(map(str, missing[:10]))
        raise InvalidInput(f"Artifact(s) not found: {listed}.", details={field: [f"not found: {listed}"]})
    return [found[pk] for pk in wanted]


def artifact_session_check(*, user, workspace_id: int, session_id: int) -> None:
    """A file is sent with a session only if it is ``user``'s own session in that
    workspace (sessions are personal: anyone else's reads as one that does not exist).
    The session model is reached through the foreign key, not imported: the executions
    app sits above this one."""
    sessions = Artifact._meta.get_field("session").related_model.objects
    if not sessions.filter(pk=session_id, workspace_id=workspace_id, created_by=user).exists():
        raise InvalidInput("No session with that id is yours in this workspace.",
                           details={"session": ["not found in this workspace"]})


def artifact_data_source_ids(*, workspace_id: int, artifact_ids: list[int]) -> list[int]:
    """The data sources of those of the workspace's artifacts that are tables."""
    return list(
        artifacts_in_workspace(workspace_id=workspace_id)
        .filter(pk__in=artifact_ids, data_source__isnull=False)
        .order_by("pk")
        .values_list("data_source_id", flat=True)
    )


def artifact_files_usage(*, workspace_id: int) -> tuple[int, int]:
    """(file count, total bytes) of the workspace's stored artifact files (one query)."""
    from django.db.models import Count, Sum

    usage = artifacts_in_workspace(workspace_id=workspace_id).aggregate(count=Count("id"), total=Sum("size"))
    return int(usage["count"] or 0), int(usage["total"] or 0)


def artifact_ref(artifact: Artifact) -> dict[str, Any]:
    """How a run, a hand-off or a payload names an artifact: a reference, never its data."""
    return {
        "artifact_id": artifact.pk,
        "name": artifact.name,
        "version": artifact.version,
        "content_type": artifact.content_type,
        "size": artifact.size,
        "data_source_id": artifact.data_source_id,
        "table": artifact.table,
    }


def artifact_placeholder(artifact: Artifact) -> str:
    """The text that stands for an attached file in a prompt or a message: names the
    artifact (and the table an agent queries), never carries the file's content."""
    where = ""
    if artifact.data_source_id and artifact.tables:
        listed = ", ".join(artifact.tables[:5]) + (", ..." if len(artifact.tables) > 5 else "")
        where = f"; query table {listed} on data source {artifact.data_source_id} with execute_query"
    elif not artifact.is_tabular:
        where = "; read it with load_artifact"
    return (f"{ATTACHED_FILE_PREFIX}{artifact.name!r}: artifact {artifact.pk}, version {artifact.version}, "
            f"{artifact.content_type}, {artifact.size} bytes{where}]")


def artifact_refs_of_execution(*, execution_id: int, limit: int = PIPELINE_REFS) -> list[dict[str, Any]]:
    """References to the artifacts a run wrote, oldest first (at most ``limit``)."""
    rows = Artifact.objects.filter(created_by_execution_id=execution_id).order_by("pk")[:limit]
    return [artifact_ref(artifact) for artifact in rows]


def artifact_open(*, artifact: Artifact):
    """The stored file, open for reading (the caller closes it). A store that cannot
    serve it is ArtifactStorageUnavailable (503), never a 500."""
    try:
        return artifact_storage().open(artifact.storage_name, "rb")
    except Exception:  # noqa: BLE001 - filesystem or S3 errors alike: the store is unavailable
        logger.exception("artifact %s: the stored file cannot be opened", artifact.pk)
        raise ArtifactStorageUnavailable("The artifact's file cannot be read from storage right now.") from None


def artifact_read(*, artifact: Artifact, max_bytes: int) -> bytes:
    """Up to ``max_bytes`` of the stored file."""
    handle = artifact_open(artifact=artifact)
    try:
        return handle.read(max_bytes)
    except Exception:  # noqa: BLE001 - as in artifact_open
        logger.exception("artifact %s: the stored file cannot be read", artifact.pk)
        raise ArtifactStorageUnavailable("The artifact's file cannot be read from storage right now.") from None
    finally:
        handle.close()

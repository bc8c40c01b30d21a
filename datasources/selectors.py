"""Reads of data sources, always scoped to a user or a workspace (other tenants: 404)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db.models import QuerySet

from common.errors import InvalidInput, NotFound
from datasources.models import DataSource
from tenancy.selectors import workspaces_for_user


def data_sources_for_user(*, user) -> QuerySet[DataSource]:
    """Every data source in the workspaces the user belongs to (or administers)."""
    return DataSource.objects.filter(workspace__in=workspaces_for_user(user=user)).select_related("workspace")


def data_source_get_for_user(*, user, data_source_id) -> DataSource:
    try:
        return data_sources_for_user(user=user).get(pk=int(data_source_id))
    except (DataSource.DoesNotExist, TypeError, ValueError):
        raise NotFound("Data source not found.") from None


def data_sources_in_workspace(*, workspace_id: int) -> QuerySet[DataSource]:
    return DataSource.objects.filter(workspace_id=workspace_id)


def data_source_get_in_workspace(*, workspace_id: int, data_source_id) -> DataSource:
    """The data source if it belongs to ``workspace_id``; else 404 (tools resolve ids here)."""
    try:
        return data_sources_in_workspace(workspace_id=workspace_id).get(pk=int(data_source_id))
    except (DataSource.DoesNotExist, TypeError, ValueError):
        raise NotFound(f"Data source {data_source_id} not found.") from None


def data_source_prompt_metadata(*, data_source: DataSource) -> dict:
    """What a prompt may know about a source: name, type, status, access level and the
    cached schema. Never the connection settings or credentials; never a live lookup.
    The shape matches the engine's DataSourceMetadata contract. Table classifications
    are taken from the source's current ``classifications``, so relabelling a table
    applies without rediscovery."""
    labels = data_source.classifications or {}
    tables = [
        {**table, "classification": labels.get(table.get("table_name"), table.get("classification"))}
        for table in data_source.schema_cache or []
    ]
    return {
        "data_source_id": data_source.pk,
        "name": data_source.name,
        "type": data_source.type,
        "status": data_source.status,
        "access_level": data_source.access_level,
        "schemas": tables,
    }


def sqlite_path_resolve(*, path: str) -> Path:
    """The absolute file for a SQLite source's ``path``, which must lie inside
    settings.RIVER_SQLITE_DATA_DIR (relative paths resolve there). This keeps a
    workspace from pointing a source at River's own database or another tenant's file."""
    root = Path(settings.RIVER_SQLITE_DATA_DIR).resolve()
    candidate = Path(path)
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if not resolved.is_relative_to(root) or resolved == root:
        raise InvalidInput(
            "The SQLite file must be inside the SQLite data directory.",
            details={"connection_config.path": [f"must be a file inside {root} (RIVER_SQLITE_DATA_DIR)"]},
        )
    own_database = str(settings.DATABASES["default"].get("NAME") or "")
    if own_database and resolved == Path(own_database).resolve():
        raise InvalidInput(
            "River's own database cannot be a data source.",
            details={"connection_config.path": ["River's own database cannot be a data source"]},
        )
    return resolved


def data_source_files_usage(*, workspace_id: int) -> tuple[int, int]:
    """(file count, total bytes) of the SQLite files the workspace's sources point at."""
    count = 0
    total = 0
    seen: set[Path] = set()
    sources = data_sources_in_workspace(workspace_id=workspace_id).filter(type=DataSource.Type.SQLITE)
    for source in sources:
        raw = (source.connection_config or {}).get("path")
        if not raw:
            continue
        try:
            resolved = sqlite_path_resolve(path=raw)
        except InvalidInput:
            continue
        if resolved in seen or not resolved.is_file():
            continue
        seen.add(resolved)
        count += 1
        total += resolved.stat().st_size
    return count, total

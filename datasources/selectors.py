"""Reads of data sources, always scoped to a user or a workspace (other tenants: 404)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Func, IntegerField, QuerySet

from common.compiled import CompiledQuery
from datasources.models import DataSource
from rivercore.errors import InvalidInput, NotFound
from rivercore.text import has_unstorable
from rivercore.types.datasources import TableInfo
from tenancy.selectors import workspaces_for_user


def data_sources_for_user(*, user, workspace_id: int | None = None) -> QuerySet[DataSource]:
    """Every data source in the workspaces the user belongs to (or administers); only
    ``workspace_id``'s when given."""
    rows = DataSource.objects.filter(workspace__in=workspaces_for_user(user=user)).select_related("workspace")
    return rows.filter(workspace_id=workspace_id) if workspace_id is not None else rows


def data_sources_searchable(rows: QuerySet[DataSource]) -> QuerySet[DataSource]:
    """Only what a catalog search reads of ``rows`` (id, name and the schema cache)."""
    return rows.select_related(None).only("pk", "name", "schema_cache")


def data_sources_first(*, workspace_id: int, limit: int) -> list[DataSource]:
    """The workspace's first ``limit`` data sources by name."""
    return list(DataSource.objects.filter(workspace_id=workspace_id).order_by("name", "pk")[:limit])


def data_source_choices(*, workspace_id: int, limit: int) -> list[tuple[int, str]]:
    """``(id, name)`` of the workspace's data sources by name, at most ``limit``."""
    return list(DataSource.objects.filter(workspace_id=workspace_id).order_by("name", "pk")
                .values_list("pk", "name")[:limit])


def data_source_get_for_user(*, user, data_source_id) -> DataSource:
    try:
        return data_sources_for_user(user=user).get(pk=int(data_source_id))
    except (DataSource.DoesNotExist, TypeError, ValueError):
        raise NotFound("Data source not found.") from None


def data_sources_in_workspace(*, workspace_id: int) -> QuerySet[DataSource]:
    return DataSource.objects.filter(workspace_id=workspace_id)


# Compiled once per process: a tool resolves its data source on every call (common.compiled).
_IN_WORKSPACE = CompiledQuery(
    lambda workspace_id, data_source_id: DataSource.objects.filter(workspace_id=workspace_id, pk=data_source_id)
    .select_related("workspace").defer("schema_cache").order_by()[:1],
    workspace_id=-(2**62) + 101, data_source_id=-(2**62) + 102,
)
_ID_MAX = 2**63 - 1  # a bigint key; a larger number names no row
# The sources an agent version binds, in key order, read at every run segment's start.
_BOUND_TO_VERSION = CompiledQuery(
    lambda version_id: DataSource.objects.filter(agent_versions=version_id).defer("schema_cache").order_by("pk"),
    version_id=-(2**62) + 103,
)


def data_sources_bound_to_version(*, version_id: int) -> list[DataSource]:
    """The data sources an agent version binds (``AgentVersion.data_sources``), in key
    order, without their schema cache (``data_source_prompt_tables`` answers from memory)."""
    return _BOUND_TO_VERSION.all(version_id=version_id)


def data_source_get_in_workspace(*, workspace_id: int, data_source_id) -> DataSource:
    """The data source if it belongs to ``workspace_id``, with its workspace (whose limits a
    query reads); else 404 (tools resolve ids here). The schema cache is left out of the
    read: ``data_source_tables`` answers from memory, and reading the field loads it."""
    try:
        source_id = int(data_source_id)
    except (TypeError, ValueError):
        source_id = None
    source = (_IN_WORKSPACE.first(workspace_id=int(workspace_id), data_source_id=source_id)
              if source_id is not None and 0 < source_id <= _ID_MAX else None)
    if source is None:
        raise NotFound(f"Data source {data_source_id} not found.")
    return source


# A process keeps the validated schemas of this many data sources (least recently used
# dropped). Keyed by the row's id and ``updated_at``, which every write of the schema
# cache or the classifications moves (``datasources.services``), so a changed schema is
# read afresh by every process, from the row it reads anyway.
SCHEMA_CACHE_MAX = 128
_schemas: OrderedDict[tuple, list[TableInfo]] = OrderedDict()
_schemas_lock = threading.Lock()


def _schema_remembered(key: tuple, build) -> list[TableInfo]:
    with _schemas_lock:
        tables = _schemas.get(key)
        if tables is not None:
            _schemas.move_to_end(key)
            return list(tables)
    tables = build()
    with _schemas_lock:
        _schemas[key] = tables
        while len(_schemas) > SCHEMA_CACHE_MAX:
            _schemas.popitem(last=False)
    return list(tables)


def data_source_tables(*, data_source: DataSource) -> list[TableInfo]:
    """The source's cached schema as stored, validated once per process and change
    (``SCHEMA_CACHE_MAX``) instead of on every query. The tables are shared between
    callers: read them, never change them. ``schema_cache`` is read (a query when it
    was deferred) only when the schema is not in memory."""
    return _schema_remembered((data_source.pk, data_source.updated_at, "stored"), lambda: [
        TableInfo.model_validate(table) for table in data_source.schema_cache or []])


def data_source_prompt_tables(*, data_source: DataSource) -> list[TableInfo]:
    """The tables of ``data_source_prompt_metadata`` as validated values, remembered like
    ``data_source_tables`` (a change of the classifications moves ``updated_at`` too)."""
    return _schema_remembered((data_source.pk, data_source.updated_at, "prompt"), lambda: [
        TableInfo.model_validate(table) for table in data_source_prompt_metadata(data_source=data_source)["schemas"]])


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


def sqlite_workspace_dir(*, workspace_id: int) -> Path:
    """The directory that holds a workspace's SQLite files: ``<RIVER_SQLITE_DATA_DIR>/<workspace id>``."""
    return Path(settings.RIVER_SQLITE_DATA_DIR).resolve() / str(int(workspace_id))


def _path_refused(message: str, why: str) -> InvalidInput:
    return InvalidInput(message, details={"connection_config.path": [why]})


def sqlite_path_resolve(*, workspace_id: int, path: Any) -> Path:
    """The absolute file for a SQLite source's ``path``, which must lie inside its
    workspace's directory (``sqlite_workspace_dir``) once ``..`` and symlinks are
    resolved; relative paths resolve there. One workspace can therefore never name
    another's file, River's own database or any other file on the machine."""
    if not isinstance(path, str) or not path.strip():
        raise _path_refused("connection_config.path must be a file name.", "must be a non-empty string")
    if has_unstorable(path) or any(ord(ch) < 32 for ch in path):
        raise _path_refused(
            "connection_config.path contains control characters.", "must not contain NUL or control characters"
        )
    if len(path) > 1024:
        raise _path_refused("connection_config.path is too long.", "at most 1024 characters")
    root = sqlite_workspace_dir(workspace_id=workspace_id)
    candidate = Path(path)
    try:
        resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    except (OSError, RuntimeError, ValueError):  # symlink loops, unreadable parents
        raise _path_refused("connection_config.path cannot be resolved.", "cannot be resolved") from None
    if not resolved.is_relative_to(root) or resolved == root:
        raise _path_refused(
            "The SQLite file must be inside this workspace's data directory.",
            "must be a file inside this workspace's SQLite directory (a relative path such as 'sales.sqlite3')",
        )
    own_database = str(settings.DATABASES["default"].get("NAME") or "")
    if own_database and resolved == Path(own_database).resolve():
        raise _path_refused(
            "River's own database cannot be a data source.", "River's own database cannot be a data source"
        )
    return resolved


def sqlite_path_relative(*, workspace_id: int, path: Path) -> str:
    """How a resolved file inside the workspace's directory is stored in connection_config."""
    return path.relative_to(sqlite_workspace_dir(workspace_id=workspace_id)).as_posix()


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
            resolved = sqlite_path_resolve(workspace_id=workspace_id, path=raw)
        except InvalidInput:
            continue
        if resolved in seen or not resolved.is_file():
            continue
        seen.add(resolved)
        count += 1
        total += resolved.stat().st_size
    return count, total


class _JsonArrayLength(Func):
    """Items of a JSON array column, counted by the database (the array is not loaded)."""

    output_field = IntegerField()
    template = "COALESCE(JSON_ARRAY_LENGTH(%(expressions)s), 0)"

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="COALESCE(jsonb_array_length(%(expressions)s), 0)",
                           **extra)


def data_sources_with_table_count(rows: QuerySet[DataSource]) -> QuerySet[DataSource]:
    """The rows without their cached schema, each with ``table_count`` (its cached tables),
    by name."""
    return rows.defer("schema_cache").annotate(table_count=_JsonArrayLength("schema_cache")).order_by("name", "id")

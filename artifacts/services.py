"""Writes of artifacts: create (upload or run), delete.

All or nothing: a file is checked whole (type, content, limits, tables, the workspace's
storage quota) before anything is written. Then the bytes go to the artifact store and
a table file is built, both outside any database transaction (the store may be S3, a
network call). Last, one transaction checks the quota again under the workspace's row
lock (the stored file and its table file included), inserts the row, registers the data
source and caches its schema. If any step fails, the stored file and the table file are
removed and the transaction is rolled back, so a refused or failed upload leaves no
row, no file and no data source.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import uuid
from pathlib import Path
from typing import BinaryIO

from django.conf import settings
from django.core.files import File
from django.db import IntegrityError, transaction
from django.db.models import Max

from artifacts import files, tables
from artifacts.errors import ArtifactStorageUnavailable, FileTooLarge
from artifacts.models import Artifact
from artifacts.quota import storage_quota_check
from artifacts.selectors import artifact_storage
from datasources.models import DataSource
from datasources.selectors import sqlite_path_resolve, sqlite_workspace_dir
from datasources.services import data_source_create, data_source_delete, data_source_discover
from rivercore.errors import Conflict, InvalidInput
from tenancy.models import Workspace

logger = logging.getLogger(__name__)

TABLES_DIR = "artifacts"  # inside the workspace's SQLite directory
VERSION_ATTEMPTS = 5


def _measure(stream: BinaryIO, *, field: str) -> tuple[int, str]:
    """(size, sha256) of the stream, refusing it past RIVER_ARTIFACT_MAX_BYTES."""
    limit = settings.RIVER_ARTIFACT_MAX_BYTES
    digest = hashlib.sha256()
    size = 0
    stream.seek(0)
    while chunk := stream.read(files.CHUNK):
        size += len(chunk)
        if size > limit:
            raise FileTooLarge(f"{field}: the file is larger than {limit} bytes.",
                               details={field: [f"at most {limit} bytes"]})
        digest.update(chunk)
    stream.seek(0)
    return size, digest.hexdigest()


def _table_file_build(*, workspace_id: int, file_type: files.FileType, stream: BinaryIO, stem: str,
                      token: str, field: str) -> tuple[str, list[str]]:
    """Import a tabular file into ``<workspace SQLite dir>/artifacts/<token>.sqlite3``.
    Returns (the path relative to the workspace directory, the table names). The file is
    built under a temporary name and renamed only once complete."""
    relative = f"{TABLES_DIR}/{token}.sqlite3"
    final = sqlite_path_resolve(workspace_id=workspace_id, path=relative)
    final.parent.mkdir(parents=True, exist_ok=True)
    handle, building = tempfile.mkstemp(prefix=".building-", suffix=".sqlite3", dir=final.parent)
    os.close(handle)
    try:
        if file_type.kind == "xlsx":
            sources = tables.xlsx_tables(stream=stream, field_name=field)
        else:
            sources = tables.csv_tables(stream=stream, file_type=file_type, stem=stem, field_name=field)
        specs = tables.sqlite_import(path=Path(building), tables=sources,
                                     max_rows=settings.RIVER_ARTIFACT_MAX_ROWS, field_name=field)
        os.replace(building, final)
    except BaseException:
        Path(building).unlink(missing_ok=True)
        raise
    return relative, [spec.name for spec in specs]


def _store(*, workspace_id: int, stream: BinaryIO, token: str, extension: str) -> str:
    """Save the bytes under a generated, workspace-scoped name; returns the stored name."""
    stream.seek(0)
    try:
        return artifact_storage().save(f"{workspace_id}/{token}{extension}", File(stream))
    except Exception:  # noqa: BLE001 - a full disk or an unreachable S3 alike
        logger.exception("workspace %s: the artifact store refused a file", workspace_id)
        raise ArtifactStorageUnavailable("The artifact store cannot take the file right now; try again.") from None


def _files_remove(*, workspace_id: int, storage_name: str | None, database_path: str | None) -> None:
    """Best effort: what a failed create or a delete leaves behind. Logged, never raised."""
    if storage_name:
        try:
            artifact_storage().delete(storage_name)
        except Exception:  # noqa: BLE001 - the row is gone either way; an operator can sweep
            logger.exception("workspace %s: could not delete stored artifact file %s", workspace_id, storage_name)
    if database_path:
        try:
            sqlite_path_resolve(workspace_id=workspace_id, path=database_path).unlink(missing_ok=True)
        except (OSError, InvalidInput):
            logger.exception("workspace %s: could not delete artifact table file %s", workspace_id, database_path)


def artifact_files_remove(*, artifact: Artifact) -> None:
    """The stored and table files of an artifact whose row is gone (or never committed)."""
    _files_remove(workspace_id=artifact.workspace_id, storage_name=artifact.storage_name,
                  database_path=artifact.database_path or None)


def _insert(*, workspace, name: str, fields: dict) -> Artifact:
    """The row with the next version of ``name`` in the workspace (caller holds a
    transaction; a concurrent upload of the same name takes the next number)."""
    for _ in range(VERSION_ATTEMPTS):
        latest = Artifact.objects.filter(workspace=workspace, name=name).aggregate(v=Max("version"))["v"] or 0
        try:
            with transaction.atomic():
                return Artifact.objects.create(workspace=workspace, name=name, version=latest + 1, **fields)
        except IntegrityError:
            continue
    raise Conflict("Too many uploads of this name at once; try again.", details={"name": ["busy"]})


def artifact_create(
    *,
    workspace,
    stream: BinaryIO,
    file_name: str,
    created_by=None,
    execution_id: int | None = None,
    session_id: int | None = None,
    field: str = "file",
) -> Artifact:
    """Check, store and register one file (see the module docstring). ``field`` names
    the input the file came in, for the 4xx that refuses it."""
    name = files.name_clean(file_name, field=field)
    file_type = files.type_for(name, field=field)
    size, sha256 = _measure(stream, field=field)
    files.content_check(file_type, stream, field=field,
                        xlsx_max_uncompressed=settings.RIVER_ARTIFACT_XLSX_MAX_UNCOMPRESSED_BYTES)
    if session_id is not None and (isinstance(session_id, bool) or not isinstance(session_id, int)
                                   or not 1 <= session_id < 2**63):
        raise InvalidInput("session must be a session id.", details={"session": ["a positive integer"]})
    storage_quota_check(workspace_id=workspace.pk, adding=size, field=field)  # early: before any work
    token = uuid.uuid4().hex
    database_path, table_names = None, []
    storage_name = None
    try:
        if file_type.is_tabular:
            database_path, table_names = _table_file_build(
                workspace_id=workspace.pk, file_type=file_type, stream=stream, stem=name.rpartition(".")[0],
                token=token, field=field)
        storage_name = _store(workspace_id=workspace.pk, stream=stream, token=token, extension=file_type.extension)
        with transaction.atomic():
            # Uploads of one workspace take turns here, so two cannot both fit the last
            # of the quota; the table file counts too.
            Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk", flat=True).first()
            table_bytes = sqlite_path_resolve(workspace_id=workspace.pk, path=database_path).stat().st_size \
                if database_path else 0
            storage_quota_check(workspace_id=workspace.pk, adding=size + table_bytes, field=field)
            artifact = _insert(workspace=workspace, name=name, fields={
                "kind": file_type.kind, "content_type": file_type.content_type, "size": size, "sha256": sha256,
                "storage_name": storage_name, "created_by": created_by, "created_by_execution_id": execution_id,
                "session_id": session_id, "database_path": database_path or "", "tables": table_names,
            })
            if database_path:
                source = data_source_create(
                    workspace=workspace, name=f"Artifact {artifact.pk}: {name}"[:200], type=DataSource.Type.SQLITE,
                    connection_config={"path": database_path}, credentials={},
                    description=f"Tables imported from the file {name} (artifact {artifact.pk}, version "
                                f"{artifact.version}).",
                )
                data_source_discover(data_source=source)
                artifact.data_source = source
                artifact.save(update_fields=["data_source"])
    except BaseException:
        _files_remove(workspace_id=workspace.pk, storage_name=storage_name, database_path=database_path)
        raise
    logger.info("workspace %s: artifact %s stored (%s, %d bytes, version %d%s)", workspace.pk, artifact.pk,
                file_type.kind, size, artifact.version, f", tables {', '.join(table_names)}" if table_names else "")
    return artifact


def artifact_create_from_run(*, workspace, execution_id: int, created_by, name: str, content: str) -> Artifact:
    """A file a run writes (``save_artifact``): the same checks and limits as an upload."""
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput("content: the text holds characters that are not valid Unicode.",
                           details={"content": ["not valid Unicode text"]}) from None
    with tempfile.SpooledTemporaryFile(max_size=1024 * 1024) as stream:
        stream.write(data)
        stream.seek(0)
        return artifact_create(workspace=workspace, stream=stream, file_name=name, created_by=created_by,
                               execution_id=execution_id, field="content")


def artifact_delete(*, artifact: Artifact) -> None:
    """Remove the row, its data source, and (after commit) its stored and table files."""
    workspace_id, storage_name, database_path = artifact.workspace_id, artifact.storage_name, artifact.database_path
    pk = artifact.pk
    with transaction.atomic():
        source = DataSource.objects.filter(pk=artifact.data_source_id).first() if artifact.data_source_id else None
        if source is not None:
            data_source_delete(data_source=source)
        artifact.delete()
        transaction.on_commit(lambda: _files_remove(
            workspace_id=workspace_id, storage_name=storage_name, database_path=database_path or None))
    logger.info("workspace %s: artifact %s deleted", workspace_id, pk)


def tables_dir(*, workspace_id: int) -> Path:
    """Where the workspace's imported table files live."""
    return sqlite_workspace_dir(workspace_id=workspace_id) / TABLES_DIR


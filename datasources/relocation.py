"""Moving SQLite files into their workspace's directory.

Before each workspace had a directory of its own, a SQLite source named a file
anywhere under ``RIVER_SQLITE_DATA_DIR``, so two workspaces could share one. This
moves every such file to ``<RIVER_SQLITE_DATA_DIR>/<workspace id>/`` (keeping its
relative path) and rewrites the source's ``connection_config.path``. A file used by
sources of several workspaces is copied to each, and the original is left in place
for the operator to remove. Run by migration 0003 and by
``manage.py sqlite_sources_relocate``; a second run finds nothing to do.

It takes the model class as an argument so the migration can pass its historical one.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import defaultdict
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)

OLD_DEFAULT_TIMEOUT_MS = 10_000


def _copy_database(source: Path, target: Path) -> None:
    """A consistent copy through SQLite's backup API (pending WAL pages included)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(f"{source.as_uri()}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()


def sqlite_sources_relocate(*, data_source_model) -> list[str]:
    """Relocate legacy SQLite files; returns one line per change made."""
    root = Path(settings.RIVER_SQLITE_DATA_DIR).resolve()
    changes: list[str] = []
    pending: list[tuple[object, Path, Path]] = []  # (source, legacy file, new file)
    users: dict[Path, set[int]] = defaultdict(set)
    for source in data_source_model.objects.order_by("pk"):
        config = dict(source.connection_config or {})
        if config.get("statement_timeout_ms") == OLD_DEFAULT_TIMEOUT_MS:
            # The old default, written into every config: drop it so the source
            # inherits its workspace's query timeout.
            config.pop("statement_timeout_ms")
            source.connection_config = config
            source.save(update_fields=["connection_config"])
        raw = config.get("path")
        if source.type != "sqlite" or not isinstance(raw, str) or not raw or "\x00" in raw:
            continue
        workspace_dir = root / str(source.workspace_id)
        candidate = Path(raw)
        if not candidate.is_absolute():
            current = (workspace_dir / candidate).resolve()
            if current.is_relative_to(workspace_dir) and current.is_file():
                continue  # already in its workspace's directory
        legacy = (candidate if candidate.is_absolute() else root / candidate).resolve()
        if not legacy.is_relative_to(root) or not legacy.is_file():
            continue  # outside the data directory or missing: left for the source's owner to fix
        relative = legacy.relative_to(root)
        users[legacy].add(source.workspace_id)
        pending.append((source, legacy, workspace_dir / relative))
    for source, legacy, target in pending:
        if not target.exists():
            _copy_database(legacy, target)
        config = dict(source.connection_config or {})
        config["path"] = target.relative_to(root / str(source.workspace_id)).as_posix()
        source.connection_config = config
        source.save(update_fields=["connection_config"])
        changes.append(f"data source {source.pk}: {legacy.relative_to(root)} -> {source.workspace_id}/{config['path']}")
    for legacy, workspaces in users.items():
        if len(workspaces) == 1:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{legacy}{suffix}").unlink(missing_ok=True)
            changes.append(f"removed {legacy.relative_to(root)} (moved)")
        else:
            logger.warning("%s was shared by workspaces %s: copied to each, original kept", legacy, sorted(workspaces))
    return changes

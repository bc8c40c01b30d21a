"""The workspace storage quota (``RIVER_STORAGE_QUOTA_BYTES``), as files meet it.

A file is refused when it would take what the workspace stores past the quota: its
artifact files, the SQLite files its data sources point at (the tables imported from
artifacts among them), and whatever an app above this one registers with
``storage_usage_source_register`` (executions registers its stored run results and
step outputs). That is the total ``get_storage_info`` reports, so an upload and a run
see the same figure.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from artifacts.errors import StorageQuotaExceeded
from artifacts.selectors import artifact_files_usage
from datasources.selectors import data_source_files_usage

_usage_sources: dict[str, Callable[[int], int]] = {}


def storage_usage_source_register(name: str, source: Callable[[int], int]) -> None:
    """Count ``source(workspace_id)`` bytes towards the quota (once per name)."""
    _usage_sources[name] = source


def workspace_stored_bytes(*, workspace_id: int) -> int:
    """Bytes the workspace stores, as the quota counts them."""
    _files, artifact_bytes = artifact_files_usage(workspace_id=workspace_id)
    _sources, sqlite_bytes = data_source_files_usage(workspace_id=workspace_id)
    return artifact_bytes + sqlite_bytes + sum(source(workspace_id) for source in _usage_sources.values())


def storage_quota_check(*, workspace_id: int, adding: int, field: str) -> None:
    """Raise ``StorageQuotaExceeded`` (413, naming ``field``) when ``adding`` more bytes
    would take the workspace past ``RIVER_STORAGE_QUOTA_BYTES``."""
    quota = int(settings.RIVER_STORAGE_QUOTA_BYTES)
    used = workspace_stored_bytes(workspace_id=workspace_id)
    if used + adding <= quota:
        return
    raise StorageQuotaExceeded(
        f"{field}: this file needs {adding} bytes, and the workspace already stores {used} of its {quota} "
        "bytes (RIVER_STORAGE_QUOTA_BYTES). Delete files it no longer needs, or ask an operator to raise the quota.",
        details={field: [f"over the workspace's storage quota: {max(quota - used, 0)} bytes left, "
                         f"{adding} needed"]},
    )

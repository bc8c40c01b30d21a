"""Errors of the artifact services, on top of the shared taxonomy in rivercore.errors."""

from __future__ import annotations

from rivercore.errors import InvalidInput, RiverError


class FileTooLarge(InvalidInput):
    """The file is larger than RIVER_ARTIFACT_MAX_BYTES (nothing was stored). Bad input,
    answered 413 rather than 400."""

    status_code = 413
    code = "file_too_large"


class ArtifactStorageUnavailable(RiverError):
    """The artifact store could not be written or read (a full disk, S3 unreachable)."""

    status_code = 503
    code = "artifact_storage_unavailable"


class StorageQuotaExceeded(InvalidInput):
    """Storing the file would take the workspace past RIVER_STORAGE_QUOTA_BYTES (nothing
    was stored). Answered 413, like a file over the size limit."""

    status_code = 413
    code = "storage_quota_exceeded"

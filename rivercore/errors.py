"""Errors that services raise and every entry point turns into one response shape.

API responses carry ``{"error": {"code", "message", "details"}}``; a Celery task or
management command prints the same code and message.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


class RiverError(Exception):
    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, details: Any = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details if details is not None else {}


class InvalidInput(RiverError):
    status_code = 400
    code = "validation_error"


class PermissionDenied(RiverError):
    status_code = 403
    code = "permission_denied"


class NotFound(RiverError):
    status_code = 404
    code = "not_found"


class Conflict(RiverError):
    status_code = 409
    code = "conflict"


def pydantic_details(exc: ValidationError) -> dict[str, list[str]]:
    """Field path -> messages, from a pydantic ValidationError."""
    details: dict[str, list[str]] = {}
    for err in exc.errors():
        path = ".".join(str(part) for part in err.get("loc", ())) or "non_field_errors"
        details.setdefault(path, []).append(err.get("msg", "invalid"))
    return details

"""An approved write that meets a transient database error is tried again.

A write runs as one transaction in the customer database. When it fails before its
COMMIT was sent, the transaction was rolled back and nothing was written, so running
it again is safe; whether it is worth running again depends on the error (its
SQLSTATE class, common.dberrors): a serialization failure, a deadlock victim, a
terminated backend or a connection that could not be opened are retried, with
exponential backoff and jitter and a bounded number of attempts. Anything else is
permanent and reported at once (a syntax or permission error, bad data, a broken
constraint, ``stack depth limit exceeded``).

When the connection breaks *while the COMMIT is in flight*, nobody can tell whether
the server committed. That write is never retried (it could be written twice): it is
reported as ``write_outcome_unknown`` so the run, the model and the approver learn
that the data must be checked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from common.dberrors import Backoff
from datasources import connectors
from rivercore.errors import RiverError

logger = logging.getLogger("river.datasources")

WRITE_BACKOFF = Backoff(attempts=4, base_seconds=0.1, cap_seconds=2.0)
_sleep = time.sleep  # the wait between attempts (tests record it instead)


class WriteFailed(RiverError):
    """A transient error kept coming back until the attempts ran out."""

    status_code = 503
    code = "write_failed"


class WriteOutcomeUnknown(RiverError):
    """The connection broke during COMMIT: the write may or may not have happened."""

    status_code = 502
    code = "write_outcome_unknown"


def _transient(error: connectors.ConnectorError) -> bool:
    if getattr(error, "in_doubt", False):
        return False
    flagged = getattr(error, "transient", None)
    if flagged is not None:
        return bool(flagged)
    # Not annotated: raised before the transaction began (opening the connection or
    # the SQLite file, or SQLite's busy timeout). Nothing was sent, so it may be retried.
    return isinstance(error, connectors.ConnectionFailed)


def write_with_retry(
    run_write: Callable[[], int],
    *,
    backoff: Backoff | None = None,
    sleep: Callable[[float], None] | None = None,
) -> int:
    """Call ``run_write`` (one transaction) until it succeeds, fails permanently (the
    connector error is raised as is), or the attempts run out (WriteFailed)."""
    backoff = backoff or WRITE_BACKOFF
    sleep = sleep or _sleep
    attempt = 1
    while True:
        try:
            return run_write()
        except connectors.ConnectorError as exc:
            details = {"sqlstate": getattr(exc, "sqlstate", None), "attempts": attempt}
            if getattr(exc, "in_doubt", False):
                raise WriteOutcomeUnknown(
                    "The connection to the database was lost while the write was being committed; it may or may "
                    "not have been applied. Check the data before trying again.",
                    details={**details, "error": exc.message},
                ) from None
            if not _transient(exc):
                raise
            if attempt >= backoff.attempts:
                raise WriteFailed(
                    f"The write failed after {attempt} attempts with a transient database error; nothing was "
                    f"written: {exc.message}",
                    details={**details, "error": exc.message, "transient": True},
                ) from None
            delay = backoff.delay(attempt)
            logger.warning("write attempt %d failed with a transient error (SQLSTATE %s); retrying in %.2f s",
                           attempt, details["sqlstate"], delay)
            sleep(delay)
            attempt += 1

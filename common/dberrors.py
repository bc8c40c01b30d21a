"""Which database errors are worth trying again, decided by SQLSTATE.

PostgreSQL reports every error with a five-character SQLSTATE whose first two
characters are its class. A *transient* error says nothing about the statement: the
same work may succeed a moment later (a serialization failure, a deadlock victim, a
connection that dropped or a server that is restarting). Everything else is
*permanent*: running the same statement again gives the same answer (syntax and
permission errors in class 42, bad data in 22, constraint violations in 23, and
deterministic resource errors such as 54001 ``stack depth limit exceeded``).
Unknown codes count as permanent, so nothing is retried by accident.

Used for River's own database (a transient error at the web edge answers 503,
a transient error inside an approval resolution is retried) and for customer
databases (an approved write is retried, datasources.write_retry).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# Whole classes that are transient: 08 connection exception.
TRANSIENT_CLASSES = frozenset({"08"})
TRANSIENT_SQLSTATES = frozenset({
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "55P03",  # lock_not_available (lock_timeout, NOWAIT)
    "57P01",  # admin_shutdown (pg_terminate_backend, a fast shutdown)
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now (the server is starting up)
    "53300",  # too_many_connections
})


def sqlstate_is_transient(sqlstate: str | None) -> bool:
    """True for the SQLSTATEs above. ``None`` (no code at all) is not decided here:
    see ``error_is_transient``."""
    if not sqlstate or len(sqlstate) != 5:
        return False
    code = sqlstate.upper()
    return code in TRANSIENT_SQLSTATES or code[:2] in TRANSIENT_CLASSES


def _sqlstate_of(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg error, or of the psycopg error a Django
    DatabaseError wraps."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 5:
        code = getattr(current, "sqlstate", None)
        if isinstance(code, str) and code:
            return code
        current = current.__cause__
        seen += 1
    return None


def _is_connection_loss(exc: BaseException) -> bool:
    """A psycopg OperationalError with no SQLSTATE: the connection broke before the
    server said why (closed socket, server gone, pool timeout)."""
    import psycopg

    current: BaseException | None = exc
    for _ in range(5):
        if current is None:
            return False
        if isinstance(current, psycopg.OperationalError) and not getattr(current, "sqlstate", None):
            return True
        current = current.__cause__
    return False


def error_is_transient(exc: BaseException) -> bool:
    """Classify a psycopg error (or a Django DatabaseError wrapping one)."""
    code = _sqlstate_of(exc)
    if code is not None:
        return sqlstate_is_transient(code)
    return _is_connection_loss(exc)


def failure_annotate(error: Exception, cause: BaseException, *, committing: bool) -> Exception:
    """Record on ``error`` (raised in place of the driver's ``cause``) what a retry
    needs: ``sqlstate``, ``transient``, and ``in_doubt`` when the COMMIT was in flight
    with no answer from the server. An ERROR reported by the server means it rolled
    back; anything else (a FATAL, a dropped connection) leaves the outcome unknown.
    Returns ``error``."""
    error.sqlstate = getattr(cause, "sqlstate", None)
    error.transient = error_is_transient(cause)
    diag = getattr(cause, "diag", None)
    severity = getattr(diag, "severity_nonlocalized", None) if diag is not None else None
    error.in_doubt = committing and severity != "ERROR"
    return error


def is_pool_timeout(exc: BaseException) -> bool:
    """The web process's connection pool had no connection free in time."""
    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # pragma: no cover - psycopg-pool is a requirement
        return False
    current: BaseException | None = exc
    for _ in range(5):
        if current is None:
            return False
        if isinstance(current, PoolTimeout):
            return True
        current = current.__cause__
    return False


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential backoff with full jitter: attempt n (from 1) waits a
    random time up to ``min(cap, base * 2**(n-1))`` before the next one."""

    attempts: int = 4
    base_seconds: float = 0.05
    cap_seconds: float = 1.0

    def delay(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        return rng() * min(self.cap_seconds, self.base_seconds * (2 ** (attempt - 1)))


def retry_transient(
    fn: Callable[[], T],
    *,
    backoff: Backoff,
    is_transient: Callable[[BaseException], bool],
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """Call ``fn`` until it returns, a permanent error is raised, or the attempts
    run out (the last error is raised). ``fn`` must be safe to call again after a
    transient error, e.g. one transaction that was rolled back."""
    attempt = 1
    while True:
        try:
            return fn()
        except Exception as exc:
            if attempt >= backoff.attempts or not is_transient(exc):
                raise
            if on_retry is not None:
                on_retry(attempt, exc)
            sleep(backoff.delay(attempt))
            attempt += 1

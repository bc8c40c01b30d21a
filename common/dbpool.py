"""503 with Retry-After, never 500, when River's own database cannot serve a request.

The web process borrows connections from a bounded pool (settings: RIVER_DB_POOL*).
When every connection is busy for longer than the pool's timeout, psycopg_pool
raises PoolTimeout, which Django wraps in an OperationalError. That, and any other
transient database error that reaches a view (a dropped connection, a server that
is restarting, too many connections), says "try again shortly", not "River is
broken": the client gets 503 and a Retry-After header. API paths get River's JSON
error shape; pages get a short HTML page.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.http import HttpResponse, JsonResponse

from common.dberrors import error_is_transient, is_pool_timeout

logger = logging.getLogger("river.db")

RETRY_AFTER_SECONDS = 5
API_PREFIX = "/api/"


def database_unavailable_response(request, *, pool_exhausted: bool):
    if pool_exhausted:
        code, message = "database_busy", "All database connections are busy; try again shortly."
    else:
        code, message = "database_unavailable", "The database is briefly unavailable; try again shortly."
    if request.path.startswith(API_PREFIX):
        response = JsonResponse({"error": {"code": code, "message": message, "details": {}}}, status=503)
    else:
        response = HttpResponse(
            "<!doctype html><title>River is busy</title><h1>River is busy</h1>"
            f"<p>{message}</p>",
            status=503,
            content_type="text/html; charset=utf-8",
        )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response


class DatabaseUnavailableMiddleware:
    """Turns a pool timeout or a transient database error raised by a view (or the
    rendering of its template) into 503 + Retry-After."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, DatabaseError):
            return None
        pool_exhausted = is_pool_timeout(exception)
        if not (pool_exhausted or error_is_transient(exception)):
            return None
        logger.warning("answered 503 to %s %s: %s", request.method, request.path,
                       "connection pool exhausted" if pool_exhausted else type(exception).__name__)
        return database_unavailable_response(request, pool_exhausted=pool_exhausted)


def worker_pool_enable(alias: str = DEFAULT_DB_ALIAS) -> bool:
    """Borrow this Celery worker process's connections from a pool (called after the fork,
    in ``worker_process_init``). A worker's tools, its run host's I/O thread and its task
    thread each close their connection when done; with the pool that hands it back
    instead of ending the session, so a tool call does not open a new connection.
    Returns whether the pool is on (PostgreSQL and ``RIVER_WORKER_DB_POOL``)."""
    db = connections[alias]
    if not settings.RIVER_WORKER_DB_POOL or db.vendor != "postgresql":
        return False
    if db.settings_dict["OPTIONS"].get("pool"):
        return True
    db.close()  # a connection made before the fork belongs to the parent
    type(db)._connection_pools.pop(alias, None)  # so does a pool (never opened here)
    db.settings_dict["CONN_MAX_AGE"] = 0  # a pool and persistent connections exclude each other
    db.settings_dict["OPTIONS"]["pool"] = {
        "min_size": settings.RIVER_DB_POOL_MIN_SIZE,
        "max_size": settings.RIVER_DB_POOL_MAX_SIZE,
        "timeout": settings.RIVER_DB_POOL_TIMEOUT_SECONDS,
    }
    db.__dict__.pop("pool", None)  # the wrapper may have looked for a pool already
    db.close_at = None
    return True

"""Errors of the data source services, on top of the shared taxonomy in rivercore.errors."""

from __future__ import annotations

from rivercore.errors import InvalidInput, RiverError


class DataSourceUnavailable(RiverError):
    """The database could not be reached or refused the login. Worth retrying later.
    ``details.failure`` is the class of failure (refused, timeout, unreachable, auth, protocol, lost)."""

    status_code = 503
    code = "data_source_unavailable"


class HostNotAllowed(InvalidInput):
    """The source's host is one River does not connect to (nothing was sent to it)."""

    code = "host_not_allowed"


class QueryRefused(InvalidInput):
    """The SQL guard (or the database's read-only transaction) refused the statement."""

    code = "query_refused"


class QueryFailed(InvalidInput):
    """The statement reached the database and failed there (syntax, unknown column...)."""

    code = "query_failed"


class QueryTimedOut(RiverError):
    """The statement ran past the source's statement timeout and was cancelled."""

    status_code = 504
    code = "query_timeout"

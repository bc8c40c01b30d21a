"""The HTTP edge shared by ``/mcp/`` and ``/a2a/``: the Host header checked against
``ALLOWED_HOSTS`` (these requests do not pass through Django's handler, which would check
it), the caller authenticated and throttled (``interop.callers``), and the 401 / 429 / 400
answers in the REST API's error shape. What passed is handed on in two context
variables, read by the protocol handlers the SDKs call."""

from __future__ import annotations

from contextvars import ContextVar

from django.conf import settings
from django.db import DatabaseError
from django.http.request import split_domain_port, validate_host
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from common.dberrors import error_is_transient, is_pool_timeout
from common.dbpool import RETRY_AFTER_SECONDS
from interop.callers import Caller, caller_authenticate, caller_throttle
from interop.runs import Links, db
from rivercore.errors import RiverError
from triggers.apikeys import NotAuthenticated, RateLimited

CALLER: ContextVar[Caller] = ContextVar("interop_caller")
LINKS: ContextVar[Links] = ContextVar("interop_links")
# Added to every answer, as Django's SecurityHeadersMiddleware does for its own: nothing
# here is a page to sniff or a response to keep.
HEADERS = [(b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store")]


def with_headers(send: Send) -> Send:
    async def sending(message) -> None:
        if message["type"] == "http.response.start":
            present = {name.lower() for name, _ in message.get("headers", [])}
            message = {
                **message,
                "headers": [*message.get("headers", []), *[(n, v) for n, v in HEADERS if n not in present]],
            }
        await send(message)

    return sending


def error_response(error: RiverError) -> JSONResponse:
    body = {"error": {"code": error.code, "message": error.message, "details": error.details or {}}}
    headers = {}
    if isinstance(error, NotAuthenticated):
        headers["WWW-Authenticate"] = 'Bearer realm="river"'
    if isinstance(error, RateLimited):
        headers["Retry-After"] = str(error.retry_after)
    return JSONResponse(body, status_code=error.status_code, headers=headers)


def _links(scope: Scope, host: str) -> Links:
    public = (getattr(settings, "RIVER_PUBLIC_URL", "") or "").rstrip("/")
    if public:
        return Links(base=public)
    return Links(base=f"{scope.get('scheme', 'http')}://{host}")


async def edge_admit(scope: Scope, receive: Receive, send: Send) -> bool:
    """Authenticate and count the request, setting ``CALLER`` and ``LINKS``; when it may
    not go on, answer it here and return False."""
    headers = Headers(scope=scope)
    host = headers.get("host", "")
    domain, _port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS or (["localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else [])
    if not domain or not validate_host(domain, allowed):
        response = JSONResponse(
            {"error": {"code": "bad_host", "message": "Host not allowed.", "details": {}}}, status_code=400
        )
        await response(scope, receive, send)
        return False
    try:
        caller = await db(
            caller_authenticate, authorization=headers.get("authorization", ""), api_key=headers.get("x-api-key", "")
        )
        await db(caller_throttle, caller=caller)
    except (NotAuthenticated, RateLimited) as error:
        await error_response(error)(scope, receive, send)
        return False
    except DatabaseError as error:
        # As common.dbpool answers for Django's views: busy or briefly away is a 503 with
        # Retry-After, never a 500; anything else is a real fault and propagates.
        if not (is_pool_timeout(error) or error_is_transient(error)):
            raise
        response = JSONResponse(
            {
                "error": {
                    "code": "database_unavailable",
                    "message": "The database is briefly unavailable; try again shortly.",
                    "details": {},
                }
            },
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
        await response(scope, receive, send)
        return False
    CALLER.set(caller)
    LINKS.set(_links(scope, host))
    return True

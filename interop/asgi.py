"""Which ASGI application serves an HTTP request: ``/mcp`` the MCP server, ``/a2a/`` the
A2A endpoints, anything else Django (riverapp/asgi.py)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

MCP_PATHS = ("/mcp", "/mcp/")
A2A_PREFIX = "/a2a/"


def interop_route(django_app: ASGIApp) -> ASGIApp:
    from interop.a2a_server import a2a_app
    from interop.edge import with_headers
    from interop.mcp_server import mcp_app

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if path in MCP_PATHS:
            await mcp_app(scope, receive, with_headers(send))
        elif path.startswith(A2A_PREFIX):
            await a2a_app(scope, receive, with_headers(send))
        else:
            await django_app(scope, receive, send)

    return route

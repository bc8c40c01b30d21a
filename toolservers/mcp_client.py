"""River's one door to MCP servers, through the official ``mcp`` SDK.

Every call opens a session, does one thing and closes it: a stdio server is a child
process that lives for one discovery or one tool call (no process outlives the call,
none is shared between workspaces), an HTTP server gets one connection. Everything
here is bounded by a timeout; whatever goes wrong comes back as ``McpUnavailable``
with a message fit to show (no secret in it: the env and headers never appear)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from toolservers.transport import Endpoint, McpUnavailable


def _connection(endpoint: Endpoint, timeout: float, errlog) -> Client:
    if endpoint.transport == "stdio":
        # The child gets the SDK's minimal environment (PATH, HOME, ...) plus the
        # server's own env: none of River's settings or secrets.
        params = StdioServerParameters(
            command=endpoint.command, args=list(endpoint.args), env=dict(endpoint.env), cwd=tempfile.gettempdir()
        )
        return Client(stdio_client(params, errlog=errlog), read_timeout_seconds=timeout)
    http = httpx2.AsyncClient(headers=dict(endpoint.headers), timeout=httpx2.Timeout(timeout), follow_redirects=False)
    return Client(streamable_http_client(endpoint.url, http_client=http), read_timeout_seconds=timeout)


def _described(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "The tool server did not answer in time."
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _described(inner)
    if isinstance(exc, FileNotFoundError | PermissionError):
        return "The tool server's command could not be started."
    if isinstance(exc, httpx2.HTTPError):
        return f"The tool server could not be reached ({exc.__class__.__name__})."
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"The tool server failed: {exc.__class__.__name__}{': ' + text if text else ''}"


def _run(endpoint: Endpoint, timeout: float, work) -> Any:
    async def main():
        with open(os.devnull, "w") as errlog, anyio.fail_after(timeout):
            async with _connection(endpoint, timeout, errlog) as client:
                return await work(client)

    try:
        return anyio.run(main)
    except McpUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - the SDK, the transport and the server fail in many ways
        raise McpUnavailable(_described(exc)) from None


TOOLS_MAX = 200


def tools_list(*, endpoint: Endpoint, timeout: float) -> list[dict[str, Any]]:
    """The server's tools as JSON (name, description, inputSchema, annotations)."""

    async def work(client: Client) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = []
        cursor = None
        for _page in range(20):
            page = await client.list_tools(cursor=cursor)
            listed.extend(tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools)
            cursor = page.next_cursor
            if not cursor or len(listed) >= TOOLS_MAX:
                break
        return listed[:TOOLS_MAX]

    return _run(endpoint, timeout, work)


def tool_call(*, endpoint: Endpoint, tool: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The result of one call as JSON (content, structuredContent, isError)."""

    async def work(client: Client) -> dict[str, Any]:
        result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    return _run(endpoint, timeout, work)


def ping(*, endpoint: Endpoint, timeout: float) -> None:
    async def work(client: Client) -> None:
        await client.send_ping()

    _run(endpoint, timeout, work)

"""What River's MCP and A2A clients share and what their callers need without loading
either SDK: how to reach a server (``Endpoint``) and the one error every failure to
reach it becomes (``McpUnavailable``).

The SDKs themselves (``mcp``, ``a2a`` and their generated types: about a second of CPU to
import) are loaded by ``toolservers.mcp_client`` and ``toolservers.a2a_client``, which
River imports only when it talks to a server, so that a Celery worker or a ``manage.py``
command starts without them (tests/riverapp/test_cold_start.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

MESSAGE_MAX = 500


class McpUnavailable(Exception):
    """The server could not be reached, did not answer in time, or answered garbage."""

    def __init__(self, message: str):
        super().__init__(message[:MESSAGE_MAX])
        self.message = message[:MESSAGE_MAX]


@dataclass(frozen=True)
class Endpoint:
    transport: str  # "stdio" | "http" | "a2a"
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)

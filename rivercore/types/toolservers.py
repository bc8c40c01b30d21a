"""Typed values for tools of MCP servers (River as an MCP client, docs/mcp.md).

An agent version names such a tool ``mcp:<server>/<tool>``; the model sees a sanitized
form of it (``mcp__<server>__<tool>``, OpenAI function names allow ``[A-Za-z0-9_-]``
only). A run carries the specs of the reviewed, enabled tools its version names, read
when the run loads, so the engine never asks the database from its loop."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PREFIX = "mcp:"
SERVER_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
TOOL_NAME_MAX = 54  # "mcp:" + 40 + "/" + 54 stays within an agent tool name's 100 characters
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def river_name(server: str, tool: str) -> str:
    return f"{PREFIX}{server}/{tool}"


def river_name_split(name: str) -> tuple[str, str] | None:
    """(server, tool) of ``mcp:<server>/<tool>``, or None for any other name."""
    if not name.startswith(PREFIX) or "/" not in name:
        return None
    server, _, tool = name[len(PREFIX) :].partition("/")
    if not server or not tool:
        return None
    return server, tool


def model_name(name: str) -> str:
    """The function name the model is given for River tool ``name``: unchanged when it
    is a valid function name, else sanitized (and shortened with a digest of the whole
    name, so two tools never share one)."""
    if not _UNSAFE.search(name) and len(name) <= 64:
        return name
    split = river_name_split(name)
    base = f"mcp__{split[0]}__{split[1]}" if split else name
    safe = _UNSAFE.sub("_", base)
    if len(safe) <= 64 and safe == base:
        return safe
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe[:55]}_{digest}"


class McpToolSpec(BaseModel):
    """A reviewed MCP tool as a run uses it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(max_length=100)  # mcp:<server>/<tool>
    server_id: int
    tool_id: int
    tool: str = Field(max_length=TOOL_NAME_MAX)  # the server's own name for it
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    writes: bool = True
    digest: str = ""  # what was reviewed; the call is refused if the tool changed since

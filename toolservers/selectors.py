"""Reads of tool servers and their tools, tenant-scoped: another workspace's id is a 404."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from rivercore.errors import NotFound
from rivercore.types.toolservers import McpToolSpec, river_name, river_name_split
from tenancy.selectors import workspaces_for_user
from toolservers.models import McpTool, ToolServer

DESCRIPTION_MAX = 2000  # of a tool's description in the model's prompt


def tool_servers_for_user(*, user, workspace_id: int | None = None) -> QuerySet[ToolServer]:
    rows = ToolServer.objects.filter(workspace__in=workspaces_for_user(user=user))
    if workspace_id is not None:
        rows = rows.filter(workspace_id=workspace_id)
    return rows.select_related("workspace").order_by("name", "id")


def tool_server_get_for_user(*, user, server_id) -> ToolServer:
    try:
        return tool_servers_for_user(user=user).get(pk=int(server_id))
    except (ToolServer.DoesNotExist, TypeError, ValueError, OverflowError):
        raise NotFound("Tool server not found.") from None


def tool_server_tools(*, server: ToolServer) -> list[McpTool]:
    return list(server.tools.order_by("name", "id"))


def mcp_tool_get(*, server: ToolServer, name: str) -> McpTool:
    try:
        return server.tools.get(name=str(name))
    except McpTool.DoesNotExist:
        raise NotFound("Tool not found on this server.") from None


def _named(*, workspace_id: int, names: Iterable[str]) -> dict[str, McpTool]:
    wanted: dict[tuple[str, str], str] = {}
    for name in names:
        split = river_name_split(name)
        if split is not None:
            wanted[split] = name
    if not wanted:
        return {}
    rows = McpTool.objects.filter(
        server__workspace_id=workspace_id, server__name__in={s for s, _ in wanted}, name__in={t for _, t in wanted}
    ).select_related("server")
    return {wanted[(row.server.name, row.name)]: row for row in rows if (row.server.name, row.name) in wanted}


def mcp_tool_names_unusable(*, workspace_id: int, names: Iterable[str]) -> list[str]:
    """The ``mcp:<server>/<tool>`` names among ``names`` that are no reviewed, enabled,
    unchanged tool of the workspace."""
    names = [n for n in names if river_name_split(n) is not None]
    found = _named(workspace_id=workspace_id, names=names)
    return sorted(n for n in names if n not in found or not found[n].usable)


def mcp_tool_specs(*, workspace_id: int, names: Iterable[str]) -> list[McpToolSpec]:
    """The specs of the usable MCP tools among ``names``, for a run (a tool disabled or
    changed since its version was made is left out: the model is not offered it)."""
    found = _named(workspace_id=workspace_id, names=names)
    return [
        McpToolSpec(
            name=river_name(row.server.name, row.name),
            server_id=row.server_id,
            tool_id=row.pk,
            tool=row.name,
            description=(row.description or "")[:DESCRIPTION_MAX],
            input_schema=row.input_schema or {},
            writes=row.action_class != McpTool.ActionClass.READ,
            digest=row.digest,
        )
        for name, row in sorted(found.items())
        if row.usable
    ]


def mcp_tools_usable_in_workspace(*, workspace_id: int) -> list[str]:
    """Every usable tool's ``mcp:<server>/<tool>`` name (the agent builder's choices)."""
    rows = McpTool.objects.filter(server__workspace_id=workspace_id, enabled=True, present=True).select_related(
        "server"
    )
    return sorted(river_name(row.server.name, row.name) for row in rows if row.usable)


def mcp_tool_diff(*, tool: McpTool) -> list[str]:
    """The unified diff between what was reviewed and what the server lists now
    (description, then the input schema as indented JSON); empty when unchanged."""
    import difflib
    import json

    if not tool.changed:
        return []

    def lines(description: str, schema) -> list[str]:
        return [
            *(description or "").splitlines(),
            "--- inputSchema ---",
            *json.dumps(schema, indent=2, sort_keys=True).splitlines(),
        ]

    return list(
        difflib.unified_diff(
            lines(tool.reviewed_description, tool.reviewed_schema),
            lines(tool.description, tool.input_schema),
            fromfile="reviewed",
            tofile="now",
            lineterm="",
            n=2,
        )
    )[:400]

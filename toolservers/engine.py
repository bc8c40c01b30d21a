"""The MCP port the engine calls (rivercore.tools.McpPort): argument checks against a
tool's input schema, and the call itself, made in a tool thread after the gate let it
through.

The call re-reads the tool before it sends anything: a tool disabled, changed, moved
to another class or belonging to another workspace since the run loaded is refused,
so a run never acts on a review that no longer holds."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import transaction

from common.jsonschema_safe import schema_errors
from governance.audit import audit_record
from rivercore.context import screen_payload
from rivercore.tools import McpPort, ToolContext, ToolError, ToolErrorKind
from rivercore.types.toolservers import McpToolSpec
from toolservers.models import McpTool, ToolServer
from toolservers.services import tool_server_endpoint, tool_server_health_record
from toolservers.transport import McpUnavailable


def _capped(result: dict[str, Any], limit: int) -> tuple[dict[str, Any], bool]:
    """The result's text and structured content within ``limit`` bytes; other content
    (images, audio, embedded resources) is named, not passed on."""
    budget = limit
    content: list[dict[str, Any]] = []
    cut = False
    for part in result.get("content") or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            text = part["text"].replace("\x00", "")
            if len(text.encode()) > budget:
                text = text.encode()[: max(budget, 0)].decode(errors="ignore")
                cut = True
            budget -= len(text.encode())
            content.append({"type": "text", "text": text})
        else:
            content.append({"type": str(part.get("type") or "unknown")[:40], "omitted": True})
    out: dict[str, Any] = {"content": content}
    structured = result.get("structuredContent")
    if structured is not None:
        body = json.dumps(structured, default=str)
        if len(body.encode()) <= max(budget, 0):
            out["structured"] = structured
        else:
            cut = True
    if cut:
        out["truncated"] = True
    return out, cut


class RiverMcpPort(McpPort):
    def arguments_problems(self, spec: McpToolSpec, arguments: dict[str, Any]) -> dict[str, list[str]]:
        schema = spec.input_schema or {"type": "object"}
        return schema_errors(schema, arguments, prefix="arguments")

    def call(self, ctx: ToolContext, spec: McpToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
        tool = (
            McpTool.objects.select_related("server", "server__workspace")
            .filter(pk=spec.tool_id, server_id=spec.server_id)
            .first()
        )
        if tool is None or tool.server.workspace_id != ctx.user.workspace_id:
            raise ToolError(ToolErrorKind.NOT_FOUND, f"{spec.name} no longer exists.")
        writes = tool.action_class != McpTool.ActionClass.READ
        if not tool.usable or tool.digest != spec.digest or writes != spec.writes:
            raise ToolError(
                ToolErrorKind.FORBIDDEN,
                f"{spec.name} changed or was disabled since this run started; an admin must review it.",
            )
        from toolservers import a2a_client, mcp_client  # the SDKs, loaded when a server is first called

        server = tool.server
        error: str | None = None
        try:
            endpoint = tool_server_endpoint(server=server)
            if server.transport == ToolServer.Transport.A2A:
                # One message to the remote agent; its task's end state decides the outcome.
                raw = a2a_client.ask(
                    endpoint=endpoint,
                    message=str(arguments.get("message") or ""),
                    timeout=settings.RIVER_MCP_TIMEOUT_SECONDS,
                )
            else:
                raw = mcp_client.tool_call(
                    endpoint=endpoint, tool=tool.name, arguments=arguments, timeout=settings.RIVER_MCP_TIMEOUT_SECONDS
                )
        except McpUnavailable as exc:
            error = exc.message
            raw = None
        tool_server_health_record(server_id=server.pk, error=error)
        is_error = raw is None or bool(raw.get("isError"))
        shown, _cut = _capped(raw or {}, settings.RIVER_MCP_RESULT_BYTES)
        screened = screen_payload(shown, path="result")
        with transaction.atomic():
            audit_record(
                organization_id=server.workspace.organization_id,
                workspace_id=server.workspace_id,
                actor_label=f"agent:{ctx.agent.agent_id}",
                execution_id=ctx.execution_id,
                agent_id=ctx.agent.agent_id,
                event_type="mcp_tool.called",
                details={
                    "tool": spec.name,
                    "writes": writes,
                    "transport": server.transport,
                    "outcome": ("unreachable" if raw is None else "error" if is_error else "ok"),
                    "screened": len(screened.detections),
                    "call_id": ctx.extras.get("call_id"),
                    **({"remote_state": raw.get("state")} if raw and raw.get("state") else {}),
                },
            )
        if raw is None:
            kind = ToolErrorKind.TIMEOUT if "in time" in (error or "") else ToolErrorKind.FAILED
            raise ToolError(kind, f"{spec.name}: {error}")
        if is_error:
            texts = " ".join(
                part.get("text", "") for part in screened.payload.get("content", []) if isinstance(part, dict)
            )
            raise ToolError(ToolErrorKind.FAILED, f"{spec.name} reported an error: {texts[:1000]}")
        body = dict(screened.payload)
        if screened.detections:
            body["screened"] = len(screened.detections)
        return body

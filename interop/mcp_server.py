"""River as an MCP server: streamable HTTP at ``/mcp/`` (docs/mcp.md).

Built on the official SDK's low-level ``Server`` and its ``StreamableHTTPSessionManager``
in stateless mode: every HTTP request is served by a fresh transport inside the request
itself, so nothing outlives it and nothing needs an ASGI lifespan (Daphne sends none).
``interop.edge`` authenticated and counted the request before the SDK sees it.

Tools, per caller: ``ask_<agent>`` for each active agent it may run (``interop.runs``),
``get_run`` and ``list_runs``. An agent tool starts a durable run as the caller, sends
each stored run event as an MCP progress notification while it waits (when the client
asked for progress), and answers with the run's report (``run_report``) as structured
content and as text: the answer with the query's SQL and rows once the run ended; at
once, with the approval page's link, when the run pauses; the state so far after
``RIVER_INTEROP_WAIT_SECONDS``. The run goes on in a worker whatever the client does.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from django.conf import settings
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from executions.models import Execution
from interop.callers import Caller
from interop.edge import CALLER, LINKS, edge_admit
from interop.runs import (
    RUNS_MAX,
    Links,
    agent_tool_names,
    agents_runnable,
    db,
    event_line,
    report_text,
    run_follow,
    run_get,
    run_report,
    run_start,
    runs_recent,
)
from rivercore import limits
from rivercore.errors import RiverError

SERVER_NAME = "river"
FAILED = frozenset(
    {
        Execution.Status.FAILED,
        Execution.Status.MAX_TURNS_EXCEEDED,
        Execution.Status.BUDGET_EXCEEDED,
        Execution.Status.TIMEOUT,
        Execution.Status.CANCELLED,
        Execution.Status.APPROVAL_EXPIRED,
    }
)
DESCRIPTION_MAX = 1000

PROMPT_SCHEMA = {
    "type": "object",
    "properties": {
        "prompt": {
            "type": "string",
            "minLength": 1,
            "maxLength": limits.PROMPT,
            "description": "The question or task, in plain words.",
        }
    },
    "required": ["prompt"],
    "additionalProperties": False,
}
GET_RUN = types.Tool(
    name="get_run",
    description="Report a River run by its execution_id: status, outcome, answer, the query's result, and the "
    "approval page's link while it waits for someone's approval.",
    input_schema={
        "type": "object",
        "properties": {
            "execution_id": {"type": "integer", "minimum": 1, "description": "The run's id (an ask_ tool returns it)."}
        },
        "required": ["execution_id"],
        "additionalProperties": False,
    },
    annotations=types.ToolAnnotations(read_only_hint=True),
)
LIST_RUNS = types.Tool(
    name="list_runs",
    description="List your most recent River runs, newest first.",
    input_schema={
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": RUNS_MAX, "default": 20},
            "status": {"type": "string", "enum": list(Execution.Status.values)},
        },
        "additionalProperties": False,
    },
    annotations=types.ToolAnnotations(read_only_hint=True),
)


def _agent_tool(name: str, agent) -> types.Tool:
    goal = (agent.current_version.goal or "").strip() if agent.current_version else ""
    description = (
        f"Ask the {agent.name} (River agent of the {agent.workspace.name} workspace). "
        f"{goal} Starts a governed run as you; a step that needs approval pauses it and this "
        "returns the approval page's link."
    )
    return types.Tool(
        name=name, title=f"Ask the {agent.name}", description=description[:DESCRIPTION_MAX], input_schema=PROMPT_SCHEMA
    )


def _error(message: str, details: Any = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=message)],
        is_error=True,
        structured_content={"error": {"message": message, "details": details or {}}},
    )


def _report_for(*, caller: Caller, execution_id: int, links: Links) -> dict:
    return run_report(caller=caller, execution=run_get(caller=caller, execution_id=execution_id), links=links)


def _runs_listed(*, caller: Caller, limit: int, status: str | None, links: Links) -> dict:
    runs = runs_recent(caller=caller, limit=limit, status=status)
    return {
        "runs": [
            {
                "execution_id": r.pk,
                "agent": r.agent.name,
                "workspace": r.workspace.slug,
                "status": r.status,
                "outcome": r.outcome,
                "queued_at": r.queued_at.isoformat(),
                "run_url": links.run(r.pk),
            }
            for r in runs
        ]
    }


def _unexpected(arguments: dict, allowed: set[str]) -> dict | None:
    extra = sorted(set(arguments) - allowed)
    return {name[:100]: ["Unknown argument."] for name in extra[:20]} or None


async def list_tools(ctx, params) -> types.ListToolsResult:
    agents = await db(agents_runnable, caller=CALLER.get())
    tools = [_agent_tool(name, agent) for name, agent in agent_tool_names(agents).items()]
    return types.ListToolsResult(tools=[*tools, GET_RUN, LIST_RUNS])


def _whole_number(value, *, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RiverError(
            f"{name} must be a whole number from {low} to {high}.",
            code="invalid_input",
            details={name: [f"A whole number from {low} to {high}."]},
        )
    return value


async def _ask(ctx, *, caller: Caller, links: Links, agent, arguments: dict) -> types.CallToolResult:
    execution = await db(run_start, caller=caller, agent=agent, prompt=arguments.get("prompt"), channel="mcp")
    sent = 0

    async def progress(event) -> None:
        nonlocal sent
        sent += 1
        await ctx.session.report_progress(sent, None, event_line(event))

    await run_follow(execution_id=execution.pk, wait_seconds=settings.RIVER_INTEROP_WAIT_SECONDS, on_event=progress)
    report = await db(_report_for, caller=caller, execution_id=execution.pk, links=links)
    return types.CallToolResult(
        content=[types.TextContent(text=report_text(report))],
        structured_content=report,
        is_error=report["status"] in FAILED,
    )


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    caller, links = CALLER.get(), LINKS.get()
    arguments = params.arguments or {}
    try:
        if params.name == "get_run":
            if extra := _unexpected(arguments, {"execution_id"}):
                return _error("Unknown arguments.", extra)
            execution_id = _whole_number(arguments.get("execution_id"), name="execution_id", low=1, high=2**63 - 1)
            report = await db(_report_for, caller=caller, execution_id=execution_id, links=links)
            return types.CallToolResult(
                content=[types.TextContent(text=report_text(report))], structured_content=report
            )
        if params.name == "list_runs":
            if extra := _unexpected(arguments, {"limit", "status"}):
                return _error("Unknown arguments.", extra)
            limit = _whole_number(arguments.get("limit", 20), name="limit", low=1, high=RUNS_MAX)
            status = arguments.get("status")
            if status is not None and not isinstance(status, str):
                return _error("status must be text.", {"status": ["A run status."]})
            listed = await db(_runs_listed, caller=caller, limit=limit, status=status, links=links)
            text = "\n".join(f"{r['execution_id']} {r['agent']}: {r['status']}" for r in listed["runs"])
            return types.CallToolResult(content=[types.TextContent(text=text or "No runs.")], structured_content=listed)
        agents = await db(agents_runnable, caller=caller)
        agent = agent_tool_names(agents).get(params.name)
        if agent is None:
            return _error(f"Unknown tool: {params.name[:100]}.")
        if extra := _unexpected(arguments, {"prompt"}):
            return _error("Unknown arguments.", extra)
        return await _ask(ctx, caller=caller, links=links, agent=agent, arguments=arguments)
    except RiverError as error:
        return _error(error.message, error.details)


SERVER = Server(
    SERVER_NAME,
    version="1",
    title="River",
    instructions="Ask River's governed agents. Runs act as you and need someone else's approval for "
    "the steps their policies hold; get_run reports a run that paused.",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
)


async def mcp_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI application behind ``/mcp/``."""
    if not await edge_admit(scope, receive, send):
        return
    manager = StreamableHTTPSessionManager(
        app=SERVER,
        stateless=True,
        json_response=False,
        # The Host header was checked against ALLOWED_HOSTS (interop.edge); the credential
        # is a bearer header, never a cookie, so a rebound name carries nothing.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
    )
    async with manager.run():
        await manager.handle_request(scope, receive, send)

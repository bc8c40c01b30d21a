"""The tool registry mechanism: what a tool declares and how the engine finds it.

A tool is a typed function ``handler(ctx, args) -> output`` plus the facts the
engine needs before dispatch: category, required permission, and whether
it writes (governed, intent/outcome journaled) or is idempotent (safe to retry
after a crash). Tool modules live in ``executions.tools`` and register on import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ConfigDict, model_validator

from rivercore.ports import Installed
from rivercore.types.agents import Tier
from rivercore.types.toolservers import McpToolSpec, model_name, river_name_split

if TYPE_CHECKING:
    from rivercore.contracts import AgentConfig, DataSourceMetadata, UserContext
    from rivercore.llm import LLMClient


class ToolCategory(StrEnum):
    REASONING = "reasoning"
    EXECUTION = "execution"
    INTERACTION = "interaction"


class ToolErrorKind(StrEnum):
    TIMEOUT = "timeout"  # retryable
    TRANSIENT = "transient"  # retryable (503, network)
    FORBIDDEN = "forbidden"  # 403: reported at once
    NOT_FOUND = "not_found"  # 404: reported at once
    VALIDATION = "validation"  # 422: reported at once, with field details
    FAILED = "failed"  # anything else the tool wants the model to see


RETRYABLE = frozenset({ToolErrorKind.TIMEOUT, ToolErrorKind.TRANSIENT})


class ToolError(Exception):
    """A tool failure the model should see as an observation, not a crash."""

    def __init__(self, kind: ToolErrorKind | str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.kind = ToolErrorKind(kind)
        self.message = message
        self.details = details or {}


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the run. No credentials: tools look those up
    through in-process services, scoped by ``user.workspace_id``."""

    execution_id: int
    user: UserContext
    agent: AgentConfig
    data_sources: list[DataSourceMetadata]
    input_prompt: str | None = None
    llm: LLMClient | None = None
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    category: ToolCategory
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    handler: Callable[[ToolContext, Any], BaseModel | dict[str, Any]]
    permission: str | None = None
    writes: bool = False
    idempotent: bool = False
    tier: Tier | None = None  # model-backed tools say which tier they use
    # The handler starts work that ends elsewhere (``delegate_to_agent``: a child run)
    # and returns a reference to it; the run then pauses ``awaiting_child`` holding no
    # worker, and the call's observation is appended when that work ends.
    awaits_result: bool = False
    # A successful call ends the run (``transfer_to_agent``: the conversation goes on as
    # another agent's run): the engine records the observation, then the final answer
    # (the output's ``message``), and dispatches none of the turn's later calls.
    ends_run: bool = False
    # The effect of a call, computed before a person approves it and always undone
    # (rivercore.previews; docs/approvals.md "Effect preview"). None: the tool cannot
    # say what it would change, and its approval card says so.
    preview: Callable[[ToolContext, Any], Any] | None = None
    # A tool described by JSON Schema rather than a pydantic model (an MCP server's
    # tool): the parameters the model is given.
    parameters: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    @property
    def model_name(self) -> str:
        """The function name the model sees (``rivercore.types.toolservers.model_name``)."""
        return model_name(self.name)

    def function_schema(self) -> dict[str, Any]:
        """The tool in OpenAI function-calling format, from its pydantic input model.

        Built once per tool (pydantic's schema generation is the costliest part of a
        run's prompt assembly) and handed out as a fresh copy, so a caller that
        changes it changes nothing else."""
        cached = _SCHEMAS.get(self)
        if cached is None:
            schema = dict(self.parameters) if self.parameters is not None else self.input_model.model_json_schema()
            schema.pop("title", None)
            cached = _SCHEMAS[self] = orjson.dumps(
                {
                    "type": "function",
                    "function": {"name": self.model_name, "description": self.description, "parameters": schema},
                }
            )
        result: dict[str, Any] = orjson.loads(cached)
        return result


_SCHEMAS: dict[Tool, bytes] = {}


_REGISTRY: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    if tool.name in _REGISTRY and _REGISTRY[tool.name] is not tool:
        raise ValueError(f"tool {tool.name!r} is already registered")
    _REGISTRY[tool.name] = tool
    return tool


def get_tool(name: str) -> Tool | None:
    """A registered tool (River registers its built-in tools when the executions app
    is ready)."""
    return _REGISTRY.get(name)


def all_tools() -> dict[str, Tool]:
    return dict(_REGISTRY)


# --- MCP tools (docs/mcp.md) -------------------------------------------------------


class McpPort:
    """What the engine needs of River's MCP client (``toolservers.engine``): the check
    of a call's arguments against the tool's input schema (before the gate, so nobody
    approves a call the server would refuse) and the call itself (in a tool thread)."""

    def arguments_problems(self, spec: McpToolSpec, arguments: dict[str, Any]) -> dict[str, list[str]]:
        raise NotImplementedError

    def call(self, ctx: ToolContext, spec: McpToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


_mcp: Installed[McpPort] = Installed("MCP client", "MCP tools cannot run")
mcp_port_install = _mcp.install


class McpArguments(BaseModel):
    """The arguments of an MCP tool call: any JSON object, checked against the tool's
    input schema by the installed port."""

    model_config = ConfigDict(extra="allow")


class McpResult(BaseModel):
    model_config = ConfigDict(extra="allow")


_MCP_TOOLS: dict[str, Tool] = {}


def _mcp_tool(spec: McpToolSpec) -> Tool:
    key = spec.model_dump_json()
    tool = _MCP_TOOLS.get(key)
    if tool is not None:
        return tool

    class Arguments(McpArguments):
        @model_validator(mode="after")
        def _schema(self) -> Arguments:
            problems = _mcp.get().arguments_problems(spec, dict(self.model_extra or {}))
            if problems:
                raise ValueError("; ".join(f"{where}: {', '.join(what)}" for where, what in problems.items()))
            return self

    def handler(ctx: ToolContext, args: BaseModel) -> dict[str, Any]:
        return _mcp.get().call(ctx, spec, dict(args.model_extra or {}))

    schema = dict(spec.input_schema) or {"type": "object", "properties": {}}
    tool = Tool(
        name=spec.name,
        description=spec.description or spec.tool,
        category=ToolCategory.EXECUTION,
        input_model=Arguments,
        output_model=McpResult,
        handler=handler,
        writes=spec.writes,
        idempotent=False,
        parameters=schema,
    )
    if len(_MCP_TOOLS) > 4096:  # a long-lived worker sees many versions of many tools
        for old in _MCP_TOOLS.values():
            _SCHEMAS.pop(old, None)
        _MCP_TOOLS.clear()
    _MCP_TOOLS[key] = tool
    return tool


def tool_for(name: str, agent: AgentConfig | None) -> Tool | None:
    """A built-in tool, or the MCP tool ``name`` among the agent's reviewed ones."""
    registered = _REGISTRY.get(name)
    if registered is not None or agent is None or river_name_split(name) is None:
        return registered
    for spec in agent.mcp_tools:
        if spec.name == name:
            return _mcp_tool(spec)
    return None

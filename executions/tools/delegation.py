"""delegate_to_agent: hand a task to another agent of the workspace as a child run.

An execution tool that does not write: it is governed like every execution tool
(policies may block it or require approval; at ``recommend`` it is recorded as a
suggestion and starts nothing), and the child run is itself governed by its own
action level, lowered to the parent's (docs/delegation.md). The engine pauses the run
``awaiting_child`` once the handler returns the child's reference; the child's end
appends the observation (``executions.services.delegation``)."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from executions.tools.fenced import fenced_in_transaction
from rivercore import limits
from rivercore.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from rivercore.tools import Tool, ToolCategory, ToolContext, ToolError, ToolErrorKind, register
from tenancy.permissions import AGENT_EXECUTE

PAYLOAD_MAX_BYTES = 16_384  # a delegated task carries a reference or a small object, never a data set


class DelegateInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=limits.NAME,
                       description="The id or the exact name of another active agent of this workspace.")
    task: str = Field(min_length=1, max_length=limits.PROMPT,
                      description="The instruction for that agent: what to do and what to report back.")
    payload: dict[str, Any] | None = Field(
        default=None, description=f"Optional JSON object the agent receives as its trigger payload "
                                  f"(at most {PAYLOAD_MAX_BYTES} bytes as JSON).")

    @field_validator("payload")
    @classmethod
    def _payload_small(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(orjson.dumps(value)) > PAYLOAD_MAX_BYTES:
            raise ValueError(f"must be at most {PAYLOAD_MAX_BYTES} bytes as JSON")
        return value


class DelegateOutput(BaseModel):
    """The reference the run waits on; the call's observation is the child's result."""

    child_execution_id: int
    agent_id: str
    agent_name: str
    status: str


_KINDS = ((NotFound, ToolErrorKind.NOT_FOUND), (PermissionDenied, ToolErrorKind.FORBIDDEN),
          (InvalidInput, ToolErrorKind.VALIDATION), (Conflict, ToolErrorKind.FAILED))


def _delegate(ctx: ToolContext, args: DelegateInput) -> DelegateOutput:
    from executions.services.delegation import delegation_start

    if not ctx.extras.get("durable_execution"):
        # /api/v1/execute runs in one request with no run row to pause: nothing can wait.
        raise ToolError(ToolErrorKind.FAILED, "delegate_to_agent is only available to durable runs "
                                              "(POST /api/v1/agents/{id}/run), not to a stateless execution.")
    try:
        child = delegation_start(
            parent_execution_id=ctx.execution_id, call_id=str(ctx.extras.get("call_id") or ""),
            agent_reference=args.agent, task=args.task, payload=args.payload,
            action_level=ctx.agent.action_level.value,
        )
    except (NotFound, PermissionDenied, InvalidInput, Conflict) as exc:
        kind = next(kind for error, kind in _KINDS if isinstance(exc, error))
        raise ToolError(kind, exc.message, {"code": exc.code, **(exc.details or {})}) from None
    return DelegateOutput(child_execution_id=child.pk, agent_id=str(child.agent_id), agent_name=child.agent.name,
                          status=child.status)


DELEGATE_TO_AGENT = register(
    Tool(
        name="delegate_to_agent",
        description=(
            "Hand a task to another agent of this workspace and wait for its result. The other agent runs "
            "as its own run (at most at your action level); you continue with its summary, or its failure, "
            "as this call's result."
        ),
        category=ToolCategory.EXECUTION,
        input_model=DelegateInput,
        output_model=DelegateOutput,
        handler=fenced_in_transaction(_delegate),
        permission=AGENT_EXECUTE,
        idempotent=True,  # one child per parent call: dispatched again, it finds the same child
        awaits_result=True,
    )
)

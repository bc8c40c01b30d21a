"""transfer_to_agent: hand the session's conversation to another agent of the team.

A reasoning tool (it changes no data, so it is not governed itself): once it succeeds
the engine ends this run (``Tool.ends_run``) and the run's end starts the receiving
agent's run for the same message, with the receiver's own tools, data sources and
governance (docs/sessions.md). A transfer to an agent acting at a higher level than
this run is refused: a hand-off never raises authority. A refused transfer is an
error observation saying why ("refused: ...") and the run goes on."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rivercore import limits
from rivercore.errors import InvalidInput, NotFound
from rivercore.tools import Tool, ToolCategory, ToolContext, ToolError, ToolErrorKind, register
from rivercore.types.sessions import TRANSFER_TOOL
from tenancy.permissions import AGENT_EXECUTE


class TransferInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=limits.NAME,
                       description="The id or the exact name of the team member to hand the conversation to.")
    reason: str = Field(default="", max_length=limits.DESCRIPTION,
                        description="Why that agent should take over: what the user needs from it.")


class TransferOutput(BaseModel):
    agent_id: str
    agent_name: str
    relation: str  # child, parent or peer, seen from the agent that hands over
    depth: int  # hand-offs of this message so far, this one included
    action_level: str  # the level the receiving agent acts at for this message
    reason: str
    message: str


def _transfer(ctx: ToolContext, args: TransferInput) -> TransferOutput:
    from executions.services.sessions import transfer_check

    if not ctx.extras.get("durable_execution"):
        raise ToolError(ToolErrorKind.FAILED, "refused: transfer_to_agent is only available to a session's runs "
                                              "(POST /api/v1/sessions/{id}/messages), not to a stateless execution.")
    try:
        decision = transfer_check(execution_id=ctx.execution_id, source_agent_id=ctx.agent.agent_id,
                                  reference=args.agent, action_level=ctx.agent.action_level.value, reason=args.reason)
    except NotFound as exc:
        raise ToolError(ToolErrorKind.NOT_FOUND, f"refused: {exc.message}", {"code": exc.code}) from None
    except InvalidInput as exc:
        raise ToolError(ToolErrorKind.VALIDATION, exc.message, {"code": exc.code, **(exc.details or {})}) from None
    return TransferOutput(**decision)


TRANSFER_TO_AGENT = register(
    Tool(
        name=TRANSFER_TOOL,
        description=(
            "Hand this conversation to another agent of your team (a sub-agent, your parent or a sibling, as "
            "listed under 'Your team'). Your run ends; that agent answers the user's message with its own tools "
            "and governance. Agents acting above your action level are refused."
        ),
        category=ToolCategory.REASONING,
        input_model=TransferInput,
        output_model=TransferOutput,
        handler=_transfer,
        permission=AGENT_EXECUTE,
        idempotent=True,  # it decides, the run's end acts: asked again after a crash, it decides the same
        ends_run=True,
    )
)

"""How a run is asked for: one typed value, ``RunRequest``, that every way of starting a
run builds (the API, the pages, triggers and pipelines, delegation, sessions and their
hand-offs) and ``executions.services.start.execution_start`` takes.

Ids, not model instances: the value can be logged, compared and built in a test
without a database. ``origin`` says where the run came from, and with it who the run
acts as (``user_id``: its roles) and who answers for it (``requester_id``: never its
approver; when not given, ``execution_start`` works it out from the user, a trigger
identity answering to its responsible person)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from rivercore.contracts import TriggerType
from rivercore.types.agents import ActionLevel
from rivercore.types.sessions import SessionContext

DELEGATION_SOURCE_PREFIX = "delegation:"  # a delegated run's trigger_source names its parent run


class _Origin(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    user_id: int | None = None
    requester_id: int | None = None


class PersonOrigin(_Origin):
    """Someone started it by hand, from a page (``ui``), the API (``api``), or a client of
    River's MCP server (``mcp``) or A2A endpoints (``a2a``): docs/mcp.md, docs/a2a.md."""

    kind: Literal["person"] = "person"
    user_id: int | None
    source: Literal["ui", "api", "mcp", "a2a"] = "ui"


class TriggerOrigin(_Origin):
    """A trigger fired: a schedule, an event, a webhook, a threshold, a manual preset or
    a pipeline (an upstream run's outcome, ``trigger_type`` ``workflow``)."""

    kind: Literal["trigger"] = "trigger"
    trigger_id: UUID
    trigger_type: TriggerType
    source: str
    triggered_at: datetime | None = None  # when the signal arrived (a cron slot, an event); now by default


class DelegationOrigin(_Origin):
    """A parent run's ``delegate_to_agent`` call: the child answers to that call and never
    runs above ``action_level_cap`` (the parent's level)."""

    kind: Literal["delegation"] = "delegation"
    parent_execution_id: int
    parent_call_id: str = Field(min_length=1, max_length=100)
    depth: int = Field(ge=1)
    action_level_cap: ActionLevel
    parent_traceparent: str | None = None  # the parent's span that dispatched the call: the child's trace joins it


class SessionOrigin(_Origin):
    """A message in a session: the run answers it, with the conversation around it."""

    kind: Literal["session"] = "session"
    session_id: int
    context: SessionContext
    earlier_artifact_ids: list[int] = Field(default_factory=list)  # files of earlier messages: queryable, not named


class HandOffOrigin(_Origin):
    """A session run handed the conversation over (``transfer_to_agent``): the receiver
    never runs above ``action_level_cap`` and the chain is ``depth`` long."""

    kind: Literal["handoff"] = "handoff"
    session_id: int
    context: SessionContext
    from_execution_id: int
    from_agent_id: str
    depth: int = Field(ge=1)
    action_level_cap: ActionLevel
    earlier_artifact_ids: list[int] = Field(default_factory=list)


RunOrigin = Annotated[
    PersonOrigin | TriggerOrigin | DelegationOrigin | SessionOrigin | HandOffOrigin,
    Field(discriminator="kind"),
]


class RunRequest(BaseModel):
    """A run to start: which agent, the prompt and payload, the files attached, and where
    it came from. Checked again by ``execution_start`` against the rows it names (the
    agent active, the artifacts in its workspace)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_id: UUID
    origin: RunOrigin
    prompt: str = ""
    payload: object = None  # the trigger's JSON; None is no payload (the prompt says so)
    attachments: list[int] = Field(default_factory=list)  # artifact ids of the agent's workspace

    @property
    def trigger_type(self) -> TriggerType:
        origin = self.origin
        if isinstance(origin, TriggerOrigin):
            return origin.trigger_type
        if isinstance(origin, DelegationOrigin):
            return TriggerType.WORKFLOW
        return TriggerType.MANUAL

    @property
    def trigger_source(self) -> str:
        origin = self.origin
        if isinstance(origin, PersonOrigin | TriggerOrigin):
            return origin.source
        if isinstance(origin, DelegationOrigin):
            return f"{DELEGATION_SOURCE_PREFIX}{origin.parent_execution_id}"
        if isinstance(origin, HandOffOrigin):
            return f"handoff:{origin.from_execution_id}"
        return f"session:{origin.session_id}"

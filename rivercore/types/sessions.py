"""What a run inside a session knows about the conversation around it (docs/sessions.md):
the earlier turns (a stored summary of the oldest ones, the latest ones as they were),
the team it may hand the conversation to, and the hand-off that brought it here.

Plain values, built by the executions app when a session's run is created and read by
the context builder (the system prompt) and the run's structured view (the offline
planner resolves a follow-up question against the previous turn's query)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from rivercore import limits

TRANSFER_TOOL = "transfer_to_agent"


class TeamRelation(StrEnum):
    PARENT = "parent"
    CHILD = "child"
    PEER = "peer"


class SessionQuery(BaseModel):
    """A query a turn ran: what it asked, the SQL and how big the result was (never the rows)."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(default="", max_length=limits.PROMPT)
    query: str = Field(max_length=limits.PROMPT)
    data_source_id: int | None = None
    total_rows: int | None = None
    columns: list[str] = Field(default_factory=list, max_length=limits.LIST_ITEMS)


class SessionTurn(BaseModel):
    """One exchange: the user's message, the answer it got, the queries behind the answer."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(max_length=limits.PROMPT)
    answer: str = Field(default="", max_length=limits.PROMPT)
    agent_name: str = Field(default="", max_length=limits.NAME)
    queries: list[SessionQuery] = Field(default_factory=list)


class TeamMember(BaseModel):
    """An agent the run may hand the conversation to with ``transfer_to_agent``."""

    model_config = ConfigDict(extra="forbid")

    agent_id: str
    name: str = Field(max_length=limits.NAME)
    description: str = Field(default="", max_length=limits.DESCRIPTION)
    relation: TeamRelation


class HandOff(BaseModel):
    """The transfer that started this run: who handed over, why, how deep the chain is."""

    model_config = ConfigDict(extra="forbid")

    from_agent_id: str
    from_agent_name: str = Field(max_length=limits.NAME)
    reason: str = Field(default="", max_length=limits.DESCRIPTION)
    depth: int = Field(ge=1)


class SessionContext(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: int
    message_id: int | None = None  # the user's message this run answers
    summary: str = ""  # the older turns, folded into compact lines and stored on the session
    turns: list[SessionTurn] = Field(default_factory=list)  # the latest turns, oldest first
    team: list[TeamMember] = Field(default_factory=list)
    handoff: HandOff | None = None

    @property
    def previous_question(self) -> str:
        """The question the latest turn answered, as its query was planned from it (a
        follow-up there was already resolved against the turn before), else as asked."""
        if not self.turns:
            return ""
        turn = self.turns[-1]
        asked = next((q.question for q in reversed(turn.queries) if q.question), "")
        return asked or turn.question

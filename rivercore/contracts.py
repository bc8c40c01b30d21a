"""The reasoning service contracts (ExecutionRequest / ExecutionResponse / continuation /
generate-agent), field for field as the spec names them.

``model_config`` is a pydantic reserved name, so AgentConfig exposes it as
``model_settings`` with the wire alias ``model_config``; always dump with
``by_alias=True``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rivercore import limits
from rivercore.types.agents import (
    ActionLevel,
    ApprovalRules,
    BusinessFunction,
    GovernanceLevel,
    MemoryEntry,
    ModelConfig,
    Tier,
)
from rivercore.types.datasources import TableInfo
from rivercore.types.governance import Decision, GovernancePolicySpec, ResolutionStatus
from rivercore.types.sessions import SessionContext
from rivercore.types.toolservers import McpToolSpec


class _Contract(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


class TriggerType(StrEnum):
    MANUAL = "manual"
    SCHEDULED = "scheduled"
    EVENT = "event"
    API = "api"
    THRESHOLD = "threshold"
    WORKFLOW = "workflow"


class AgentConfig(_Contract):
    agent_id: UUID
    name: str = Field(min_length=1, max_length=limits.NAME)
    business_function: BusinessFunction
    domain: str = Field(max_length=limits.NAME)
    goal: str = Field(max_length=limits.GOAL)
    instructions: str = Field(max_length=limits.PROMPT)
    system_prompt: str | None = Field(default=None, max_length=limits.PROMPT)
    action_level: ActionLevel
    governance_level: GovernanceLevel
    model_settings: ModelConfig = Field(alias="model_config")
    tools: list[Annotated[str, Field(max_length=limits.IDENTIFIER)]] = Field(max_length=limits.LIST_ITEMS)
    governance_policies: list[GovernancePolicySpec]
    approval_rules: ApprovalRules
    notification_config: dict[str, Any] | None = None
    # The reviewed, enabled MCP tools among ``tools`` (docs/mcp.md), read when the run loads.
    mcp_tools: list[McpToolSpec] = Field(default_factory=list, max_length=limits.LIST_ITEMS)


class UserContext(_Contract):
    user_id: int
    org_id: int
    workspace_id: int
    roles: list[str]
    permissions: list[str]
    attributes: dict[str, Any] | None = None


class TriggerContext(_Contract):
    trigger_type: TriggerType
    trigger_source: str = Field(max_length=limits.IDENTIFIER)
    trigger_payload: Any = None
    triggered_by: str | None = Field(default=None, max_length=limits.NAME)
    triggered_at: datetime


class DataSourceMetadata(_Contract):
    data_source_id: int
    name: str
    type: str
    status: str = "connected"
    access_level: str = "read_only"
    schemas: list[TableInfo] = Field(default_factory=list)


class ExecutionRequest(_Contract):
    execution_id: int
    agent_config: AgentConfig
    user_context: UserContext
    input_prompt: str | None = Field(default=None, max_length=limits.PROMPT)
    trigger_context: TriggerContext
    data_source_metadata: list[DataSourceMetadata]
    conversation_history: list[MemoryEntry]
    # River's addition to spec 001: the session this run answers in (docs/sessions.md).
    session: SessionContext | None = None


# --- response -------------------------------------------------------------------


class ResponseStatus(StrEnum):
    SUCCESS = "success"
    FAILED = "failed"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_INTERACTION = "awaiting_interaction"
    # River's own addition to spec 001: a durable run waits for a delegated child run.
    AWAITING_CHILD = "awaiting_child"
    MAX_TURNS_EXCEEDED = "max_turns_exceeded"
    BUDGET_EXCEEDED = "budget_exceeded"
    TIMEOUT = "timeout"


class StepType(StrEnum):
    REASONING = "reasoning"
    TOOL_CALL = "tool_call"
    OBSERVATION = "observation"
    INTERACTION = "interaction"
    GOVERNANCE_CHECK = "governance_check"
    ERROR = "error"
    FINAL_ANSWER = "final_answer"


class StepStatus(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    PENDING = "pending"


class ErrorCode(StrEnum):
    AGENT_ERROR = "AGENT_ERROR"
    TIMEOUT = "TIMEOUT"
    INVALID_TOOL = "INVALID_TOOL"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    LLM_ERROR = "LLM_ERROR"
    GOVERNANCE_BLOCKED = "GOVERNANCE_BLOCKED"
    TURN_LIMIT_EXCEEDED = "TURN_LIMIT_EXCEEDED"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    PROVIDER_UNAVAILABLE = "PROVIDER_UNAVAILABLE"
    # River addition: the runner's loop guard (the spec names it as an error code).
    INFINITE_TOOL_LOOP = "infinite_tool_loop"


class Tokens(BaseModel):
    input: int = 0
    output: int = 0


class Step(BaseModel):
    """One trace entry. ``turn``, ``call_id`` and ``messages`` are River's own:
    ``messages`` holds the chat messages the step adds, so a run's conversation can
    be rebuilt from its steps alone."""

    step_number: int
    step_type: StepType
    turn: int = 0
    tool_name: str | None = None
    tool_category: str | None = None
    call_id: str | None = None
    input: Any = None
    output: Any = None
    model_used: str | None = None
    model_tier: str | None = None
    provider: str | None = None
    tokens: Tokens | None = None
    duration_ms: int = 0
    status: StepStatus = StepStatus.COMPLETED
    governance_decision: Decision | None = None
    error: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list, exclude=True)


class ActionTaken(BaseModel):
    tool_name: str
    arguments: dict[str, Any]
    result_summary: str
    status: str


class ExecutionResult(BaseModel):
    summary: str = ""
    actions_taken: list[ActionTaken] = Field(default_factory=list)
    recommendations: list[dict[str, Any]] = Field(default_factory=list)
    output_artifacts: list[dict[str, Any]] = Field(default_factory=list)


class ApprovalRequestPayload(BaseModel):
    tool_name: str
    proposed_payload: dict[str, Any]
    reasoning_summary: str = ""
    risk_context: str = ""
    confidence_score: float | None = None
    auto_approve_eligible: bool = False
    preview: dict[str, Any] | None = None  # the call's effect (rivercore.previews), for a write
    # Quorum (governance.quorum): the most distinct approvers a matched policy asks
    # for, and the rows the call concerns when known (a data export's row count).
    required_approvals: int = 1
    rows: int | None = None
    # A call paused again at write time (docs/approvals.md "Effect preview"): the data
    # moved after the approval, or the ceiling was exceeded, so nothing was written.
    # {"approval_id": the request it follows, or None after a scope or a grant,
    #  "code": "preview_stale" | "row_ceiling_exceeded", "fingerprint": the one agreed}.
    reopens: dict[str, Any] | None = None
    # "approval" (may this call be made?) or "unknown_outcome" (an MCP write was sent
    # and its result never journaled: did it happen? rivercore.unknown_outcome).
    kind: str = "approval"


class InteractionType(StrEnum):
    CLARIFICATION_REQUEST = "clarification_request"
    CONFIRMATION_REQUEST = "confirmation_request"
    PARAMETER_REQUEST = "parameter_request"
    CREDENTIAL_REQUEST = "credential_request"


class InteractionRequest(BaseModel):
    interaction_type: InteractionType
    message: str
    options: list[str] | None = None
    required: bool = True


class ModelUsage(BaseModel):
    provider: str
    tier: str
    input_tokens: int = 0
    output_tokens: int = 0
    turns: int = 0
    estimated_cost: float | None = 0.0  # None: the model has no known price
    cost_known: bool = True


class Usage(BaseModel):
    total_turns: int = 0
    total_tokens: int = 0
    cost_estimate: float = 0.0
    cost_incomplete: bool = False  # True when some model had no known price
    models_used: dict[str, ModelUsage] = Field(default_factory=dict)
    execution_duration_ms: int = 0


class ErrorInfo(BaseModel):
    code: ErrorCode
    message: str
    recoverable: bool = False
    details: dict[str, Any] = Field(default_factory=dict)


class ExecutionResponse(BaseModel):
    execution_id: int
    status: ResponseStatus
    result: ExecutionResult = Field(default_factory=ExecutionResult)
    steps: list[Step] = Field(default_factory=list)
    approval_request: ApprovalRequestPayload | None = None
    interaction_request: InteractionRequest | None = None
    usage: Usage = Field(default_factory=Usage)
    error: ErrorInfo | None = None
    # River addition: present when paused; pass it back to /api/v1/execute/continue.
    serialized_state: str | None = None


# --- continuation -----------------------------------------------------------------


class ContinuationType(StrEnum):
    INTERACTION_RESPONSE = "interaction_response"
    APPROVAL_RESOLVED = "approval_resolved"


class InteractionResponse(_Contract):
    user_response: Any


class ApprovalResolution(_Contract):
    status: ResolutionStatus
    modified_args: dict[str, Any] | None = None
    resolved_by: str = Field(max_length=limits.NAME)
    resolution_comment: str | None = Field(default=None, max_length=limits.COMMENT)

    @model_validator(mode="after")
    def _edits_need_args(self) -> ApprovalResolution:
        if self.status == ResolutionStatus.EDITED_APPROVED and not self.modified_args:
            raise ValueError("modified_args is required when status is edited_approved")
        return self


class ContinuationRequest(_Contract):
    execution_id: int
    continuation_type: ContinuationType
    interaction_response: InteractionResponse | None = None
    approval_resolution: ApprovalResolution | None = None
    serialized_state: str

    @model_validator(mode="after")
    def _matching_payload(self) -> ContinuationRequest:
        if self.continuation_type == ContinuationType.INTERACTION_RESPONSE and self.interaction_response is None:
            raise ValueError("interaction_response is required for continuation_type interaction_response")
        if self.continuation_type == ContinuationType.APPROVAL_RESOLVED and self.approval_resolution is None:
            raise ValueError("approval_resolution is required for continuation_type approval_resolved")
        return self


# --- generate-agent ---------------------------------------------------------------


class AvailableDataSource(_Contract):
    data_source_id: int
    name: str
    type: str
    description: str = ""


class GenerateAgentRequest(_Contract):
    prompt: str = Field(min_length=1, max_length=limits.PROMPT)
    user_context: UserContext
    available_data_sources: list[AvailableDataSource]
    available_tools: list[str]
    workspace_templates: list[dict[str, Any]] = Field(default_factory=list)


class SuggestedTrigger(BaseModel):
    trigger_type: TriggerType
    trigger_config: dict[str, Any]
    reasoning: str


class SuggestedDataSource(BaseModel):
    data_source_id: int
    name: str
    access_level: str
    reasoning: str


class SuggestedTool(BaseModel):
    tool_name: str
    reasoning: str


class SuggestedPolicy(BaseModel):
    name: str
    conditions: dict[str, Any]
    enforcement: str
    reasoning: str


class GeneratedAgentConfig(BaseModel):
    name: str
    description: str
    category: BusinessFunction
    goal: str
    instructions: str
    action_level: ActionLevel
    suggested_triggers: list[SuggestedTrigger] = Field(default_factory=list)
    suggested_data_sources: list[SuggestedDataSource] = Field(default_factory=list)
    suggested_tools: list[SuggestedTool] = Field(default_factory=list)
    suggested_policies: list[SuggestedPolicy] = Field(default_factory=list)


class GenerateAgentResponse(BaseModel):
    agent_config: GeneratedAgentConfig
    reasoning: str
    confidence_score: float = Field(ge=0.0, le=1.0)
    warnings: list[str] = Field(default_factory=list)


__all__ = [name for name in dir() if not name.startswith("_")] + ["Tier"]

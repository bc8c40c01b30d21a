"""Typed values for agent configuration; the JSON fields and the engine share them."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from common import limits


class BusinessFunction(StrEnum):
    CUSTOMER_SUPPORT = "customer_support"
    SALES = "sales"
    FINANCE = "finance"
    RISK_COMPLIANCE = "risk_compliance"
    DATA_ANALYST = "data_analyst"
    OPERATIONS = "operations"
    EXECUTIVE = "executive"
    CUSTOM = "custom"


class ActionLevel(StrEnum):
    READ_ONLY = "read_only"
    RECOMMEND = "recommend"
    ACT_WITH_APPROVAL = "act_with_approval"
    AUTOMATED = "automated"


class GovernanceLevel(StrEnum):
    STANDARD = "standard"
    STRICT = "strict"
    CUSTOM = "custom"


class Tier(StrEnum):
    FAST = "fast"
    BALANCED = "balanced"
    REASONING = "reasoning"
    CODING = "coding"


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preferred_tier: Tier | None = None
    max_turns: int = Field(default=15, ge=1, le=100)
    token_budget: int = Field(default=100_000, ge=100)
    timeout_seconds: int = Field(default=30, ge=1, le=3600)
    llm_timeout_seconds: int = Field(default=120, ge=1, le=3600)


# Strings inside these JSON fields are as bounded as the API's own fields (docs/api.md).
Identifier = Annotated[str, Field(max_length=limits.IDENTIFIER)]
Recipient = Annotated[str, Field(max_length=limits.NAME)]


class AutoApproveCondition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: Identifier
    condition: str = Field(max_length=limits.DESCRIPTION)


class ApprovalRules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    require_approval_for: list[Identifier] = Field(default_factory=list, max_length=limits.LIST_ITEMS)
    auto_approve_conditions: list[AutoApproveCondition] = Field(default_factory=list, max_length=limits.LIST_ITEMS)
    approver_roles: list[Identifier] = Field(default_factory=lambda: ["admin"], max_length=limits.LIST_ITEMS)
    escalation_timeout_minutes: int = Field(default=1440, ge=1)


class NotificationConfig(BaseModel):
    """Who hears about a run's outcome: channels and the statuses that notify."""

    model_config = ConfigDict(extra="forbid")

    channels: list[Identifier] = Field(default_factory=list, max_length=limits.LIST_ITEMS)  # in_app, email, slack
    notify_on: list[Identifier] = Field(default_factory=lambda: ["failed"], max_length=limits.LIST_ITEMS)
    recipients: list[Recipient] = Field(default_factory=list, max_length=limits.LIST_ITEMS)


class MemoryEntry(BaseModel):
    """One prior run's long-term memory, as ``conversation_history`` carries it."""

    execution_id: int
    completed_at: str | None = None
    summary: str = ""
    learnings: list[str] = Field(default_factory=list)
    flagged_items: list[str] = Field(default_factory=list)


# The 17 tools of the spec's registry. Agent versions may only name these; a test in
# tests/executions checks the engine's registry matches this list exactly.
REASONING_TOOLS = (
    "classify_intent",
    "check_governance",
    "generate_query",
    "search_catalog",
    "recommend_visualization",
    "explain_results",
)
EXECUTION_TOOLS = (
    "create_data_source",
    "update_data_source",
    "delete_data_source",
    "test_connection",
    "discover_schema",
    "execute_query",
    "apply_governance_policy",
    "write_back",
    "get_workspace_info",
    "get_storage_info",
)
INTERACTION_TOOLS = ("ask_user",)
TOOL_NAMES = frozenset(REASONING_TOOLS + EXECUTION_TOOLS + INTERACTION_TOOLS)

"""Typed values for agent configuration; the JSON fields and the engine share them."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from rivercore import limits
from rivercore.types.runs import RunStatus


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


# The action levels ordered by what they let run under the strict matrix of
# governance.checker: recommend runs nothing (every call becomes a suggestion),
# read_only runs reads, act_with_approval adds writes a person approved, automated
# runs everything. A delegated run never runs above its parent's level (docs/delegation.md).
ACTION_LEVEL_ORDER = (ActionLevel.RECOMMEND, ActionLevel.READ_ONLY, ActionLevel.ACT_WITH_APPROVAL,
                      ActionLevel.AUTOMATED)


def action_level_at_most(level: ActionLevel, cap: ActionLevel) -> ActionLevel:
    """``level``, lowered to ``cap`` when it lets more run than ``cap`` does."""
    return level if ACTION_LEVEL_ORDER.index(level) <= ACTION_LEVEL_ORDER.index(cap) else cap


class GovernanceLevel(StrEnum):
    STANDARD = "standard"
    STRICT = "strict"
    CUSTOM = "custom"


class Tier(StrEnum):
    FAST = "fast"
    BALANCED = "balanced"
    REASONING = "reasoning"
    CODING = "coding"


def _not_a_boolean(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("must be a whole number, not true or false")
    return value


# A whole number for a setting: ``true`` is not 1. Each field gives its own range.
Count = Annotated[int, BeforeValidator(_not_a_boolean)]

MAX_TOKEN_BUDGET = 10_000_000
MAX_ESCALATION_TIMEOUT_MINUTES = 30 * 24 * 60  # 30 days
MIN_RUN_TIMEOUT_SECONDS = 60
MAX_RUN_TIMEOUT_SECONDS = 24 * 3600


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preferred_tier: Tier | None = None
    max_turns: Count = Field(default=15, ge=1, le=100)
    token_budget: Count = Field(default=100_000, ge=100, le=MAX_TOKEN_BUDGET)
    timeout_seconds: Count = Field(default=30, ge=1, le=3600)
    llm_timeout_seconds: Count = Field(default=120, ge=1, le=3600)
    # Wall-clock limit of a whole run, from its start (waits for approval included).
    run_timeout_seconds: Count = Field(default=3600, ge=MIN_RUN_TIMEOUT_SECONDS, le=MAX_RUN_TIMEOUT_SECONDS)


# Strings inside these JSON fields are as bounded as the API's own fields (docs/api.md).
Identifier = Annotated[str, Field(max_length=limits.IDENTIFIER)]
Recipient = Annotated[str, Field(max_length=limits.NAME)]


class AutoApproveCondition(BaseModel):
    """Skips one tool's approval when ``condition`` holds for the call. The condition
    is checked when a version is saved (agents.services) and again at run time,
    where anything that cannot be evaluated means "ask a human"."""

    model_config = ConfigDict(extra="forbid")

    tool: Identifier
    # The grammar's own limits (4,000 characters) apply when a version is saved; this
    # bound only keeps a request's text finite. A stored row must still load (and then
    # never auto-approve when it fails the grammar).
    condition: str = Field(max_length=limits.GOAL)


MAX_REQUIRED_APPROVALS = 10
Role = Annotated[str, Field(min_length=1, max_length=50)]


class QuorumRule(BaseModel):
    """Ask ``approvals`` distinct people when ``when`` holds for the paused call (a
    policy expression over ``tool.name``, ``args.*``, ``confidence_score`` and ``rows``;
    absent: always). The largest matching rule wins (governance.quorum)."""

    model_config = ConfigDict(extra="forbid")

    when: str | None = Field(default=None, max_length=limits.GOAL)
    approvals: Count = Field(ge=1, le=MAX_REQUIRED_APPROVALS)


class EscalationStep(BaseModel):
    """``after_minutes`` after a request opened, undecided, it moves to ``approver_roles``."""

    model_config = ConfigDict(extra="forbid")

    after_minutes: Count = Field(ge=1, le=MAX_ESCALATION_TIMEOUT_MINUTES)
    approver_roles: list[Role] = Field(min_length=1, max_length=20)


class ApprovalRules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    require_approval_for: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list, max_length=50
    )
    auto_approve_conditions: list[AutoApproveCondition] = Field(default_factory=list, max_length=50)
    approver_roles: list[Annotated[str, Field(min_length=1, max_length=50)]] = Field(
        default_factory=lambda: ["admin"], max_length=20
    )
    escalation_timeout_minutes: Count = Field(default=1440, ge=1, le=MAX_ESCALATION_TIMEOUT_MINUTES)
    # Issue 29 §3: N distinct approvers, and where an undecided request goes (docs/approvals.md).
    quorum: list[QuorumRule] = Field(default_factory=list, max_length=20)
    escalation: list[EscalationStep] = Field(default_factory=list, max_length=5)


class NotificationConfig(BaseModel):
    """Who hears about a run's outcome: channels and the statuses that notify."""

    model_config = ConfigDict(extra="forbid")

    channels: list[Identifier] = Field(default_factory=list, max_length=limits.LIST_ITEMS)  # in_app, email, slack
    notify_on: list[RunStatus] = Field(default_factory=lambda: [RunStatus.FAILED], max_length=limits.LIST_ITEMS)
    recipients: list[Recipient] = Field(default_factory=list, max_length=limits.LIST_ITEMS)


class MemoryEntry(BaseModel):
    """One prior run's long-term memory, as ``conversation_history`` carries it."""

    execution_id: int
    completed_at: str | None = None
    summary: str = ""
    learnings: list[str] = Field(default_factory=list)
    flagged_items: list[str] = Field(default_factory=list)


# The 17 tools of the spec's registry and River's delegate_to_agent, transfer_to_agent,
# search_memory, load_artifact and save_artifact (22 in all). Agent versions may only name
# these; a test in tests/executions checks the engine's registry matches this list exactly.
REASONING_TOOLS = (
    "classify_intent",
    "check_governance",
    "generate_query",
    "search_catalog",
    "recommend_visualization",
    "explain_results",
    "transfer_to_agent",  # River's addition: hand a session to another agent of the team (docs/sessions.md)
    "search_memory",  # River's addition: the workspace's memory (docs/memory.md)
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
    "delegate_to_agent",  # River's addition: a child run of another agent (docs/delegation.md)
    "load_artifact",  # River's additions: read and write workspace files (docs/artifacts.md)
    "save_artifact",
)
INTERACTION_TOOLS = ("ask_user",)
TOOL_NAMES = frozenset(REASONING_TOOLS + EXECUTION_TOOLS + INTERACTION_TOOLS)

"""Typed values for governance: decisions, policy shapes, notification settings."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Decision(StrEnum):
    PROCEED = "PROCEED"
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    SUGGEST_ONLY = "SUGGEST_ONLY"
    BLOCKED = "BLOCKED"


class ResolutionStatus(StrEnum):
    """What an approver decided about a paused call (the spec's resolution values;
    governance.approvals maps each to the stored ApprovalRequest.Status)."""

    APPROVED = "approved"
    REJECTED = "rejected"
    EDITED_APPROVED = "edited_approved"


class DecisionChannel(StrEnum):
    """Where an approver decided (named in the decision's audit entry): the REST API,
    the approval card in River's pages, a signed e-mail link, a Slack button."""

    API = "api"
    INBOX = "inbox"
    EMAIL = "email"
    SLACK = "slack"


class PolicyType(StrEnum):
    BUDGET = "budget"
    RATE_LIMIT = "rate_limit"
    DATA_EXPORT_LIMIT = "data_export_limit"
    TIME_WINDOW = "time_window"
    TOOL_RESTRICTION = "tool_restriction"
    CONTENT = "content"


class Enforcement(StrEnum):
    BLOCK = "block"
    REQUIRE_APPROVAL = "require_approval"
    WARN = "warn"
    LOG_ONLY = "log_only"


class PolicyScope(StrEnum):
    ORGANIZATION = "organization"
    WORKSPACE = "workspace"


class GovernancePolicySpec(BaseModel):
    """A policy as the engine receives it in ``agent_config.governance_policies``."""

    model_config = ConfigDict(extra="allow")

    policy_id: str | None = None
    name: str
    scope: PolicyScope = PolicyScope.WORKSPACE
    policy_type: PolicyType | None = None
    conditions: dict[str, Any] = Field(default_factory=dict)
    enforcement: Enforcement
    # A require_approval policy may ask for several distinct approvers (quorum).
    required_approvals: int = Field(default=1, ge=1, le=10)


class ChannelToggle(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = False


class EmailChannel(ChannelToggle):
    recipients: list[str] = Field(default_factory=list)


class SlackChannel(ChannelToggle):
    webhook_url: str | None = None
    # With River's bot token (RIVER_SLACK_BOT_TOKEN): approval messages go to this channel
    # through chat.postMessage, so River can update them when decided elsewhere.
    channel_id: str | None = Field(default=None, pattern=r"^[A-Z0-9]{1,32}$")

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL")
        return value or None


class ApprovalNotificationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    in_app: ChannelToggle = Field(default_factory=lambda: ChannelToggle(enabled=True))
    email: EmailChannel = Field(default_factory=EmailChannel)
    slack: SlackChannel = Field(default_factory=SlackChannel)

    def any_active(self) -> bool:
        return (
            self.in_app.enabled
            or (self.email.enabled and bool(self.email.recipients))
            or (self.slack.enabled and bool(self.slack.webhook_url))
        )


class CallFacts(BaseModel):
    """Everything the governance checker looks at for one proposed tool call."""

    tool_name: str
    tool_category: str
    writes: bool
    arguments: dict[str, Any] = Field(default_factory=dict)
    action_level: str
    require_approval_for: list[str] = Field(default_factory=list)
    policies: list[GovernancePolicySpec] = Field(default_factory=list)
    org_id: int
    workspace_id: int
    agent_id: str
    execution_id: int
    user_id: int | None = None
    tokens_used: int = 0
    time_zone: str = "UTC"
    confidence_score: float | None = None


class PolicyMatch(BaseModel):
    """One policy whose condition held at an evaluation point."""

    policy_id: str | None = None
    name: str
    policy_type: PolicyType
    enforcement: Enforcement
    expression: str
    error: str | None = None  # set when the condition could not be evaluated (counts as matched)
    required_approvals: int = 1


class GovernanceResult(BaseModel):
    decision: Decision
    reason: str
    # The strictest matched policy (block > require_approval > warn > log_only).
    policy_matched: str | None = None
    policy_id: str | None = None
    policy_type: str | None = None
    enforcement: str | None = None
    warnings: list[str] = Field(default_factory=list)
    matched: list[PolicyMatch] = Field(default_factory=list)
    # With APPROVAL_REQUIRED: the most distinct approvers a matched require_approval policy asks for.
    required_approvals: int = 1

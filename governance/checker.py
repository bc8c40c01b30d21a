"""The governance checker the engine calls before every tool call.

Plain Python over pydantic values: the same code serves the stateless
/api/v1/execute driver and durable runs.
"""

from __future__ import annotations

from governance.types import CallFacts, Decision, GovernanceResult

READ_ONLY = "read_only"
RECOMMEND = "recommend"
ACT_WITH_APPROVAL = "act_with_approval"
AUTOMATED = "automated"


def action_level_decision(*, action_level: str, writes: bool, requires_approval: bool) -> Decision:
    """The spec's action-level matrix, exactly."""
    if action_level == RECOMMEND:
        return Decision.SUGGEST_ONLY
    if not writes:
        return Decision.PROCEED
    if action_level == READ_ONLY:
        return Decision.BLOCKED
    if action_level == ACT_WITH_APPROVAL:
        return Decision.APPROVAL_REQUIRED if requires_approval else Decision.PROCEED
    if action_level == AUTOMATED:
        return Decision.PROCEED
    return Decision.BLOCKED


def check_tool_call(facts: CallFacts) -> GovernanceResult:
    decision = action_level_decision(
        action_level=facts.action_level,
        writes=facts.writes,
        requires_approval=facts.tool_name in facts.require_approval_for,
    )
    reason = {
        Decision.PROCEED: f"{facts.tool_name} is allowed at action level {facts.action_level}.",
        Decision.APPROVAL_REQUIRED: f"{facts.tool_name} needs human approval at action level {facts.action_level}.",
        Decision.SUGGEST_ONLY: f"Action level {facts.action_level}: {facts.tool_name} is recorded as a suggestion.",
        Decision.BLOCKED: f"{facts.tool_name} writes, and action level {facts.action_level} forbids writes.",
    }[decision]
    return GovernanceResult(decision=decision, reason=reason)

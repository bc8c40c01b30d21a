"""The engine's side of governance: builds the facts from run state and asks the
governance checker. Decisions themselves live in ``governance.checker``."""

from __future__ import annotations

from executions.engine.state import RunState
from executions.engine.tools import Tool
from governance import checker
from governance.types import CallFacts, Decision, GovernanceResult


def call_facts(state: RunState, tool: Tool, arguments: dict, *, confidence: float | None = None) -> CallFacts:
    request = state.request
    cfg = request.agent_config
    user = request.user_context
    attributes = user.attributes or {}
    return CallFacts(
        tool_name=tool.name,
        tool_category=tool.category.value,
        writes=tool.writes,
        arguments=arguments,
        action_level=cfg.action_level.value,
        require_approval_for=cfg.approval_rules.require_approval_for,
        policies=cfg.governance_policies,
        org_id=user.org_id,
        workspace_id=user.workspace_id,
        agent_id=str(cfg.agent_id),
        execution_id=request.execution_id,
        user_id=user.user_id,
        tokens_used=state.total_tokens,
        time_zone=str(attributes.get("time_zone") or "UTC"),
        confidence_score=confidence,
    )


def before_tool(state: RunState, tool: Tool, arguments: dict, *, confidence: float | None) -> GovernanceResult:
    return checker.check_tool_call(call_facts(state, tool, arguments, confidence=confidence))


def before_llm(state: RunState) -> GovernanceResult:
    cfg = state.request.agent_config
    if not cfg.governance_policies:
        return GovernanceResult(decision=Decision.PROCEED, reason="no policies")
    user = state.request.user_context
    return checker.check_llm_call(
        policies=cfg.governance_policies,
        tokens_used=state.total_tokens,
        org_id=user.org_id,
        workspace_id=user.workspace_id,
        agent_id=str(cfg.agent_id),
        execution_id=state.request.execution_id,
    )


def after_query(state: RunState, tool: Tool, arguments: dict, *, rows: int, tables: list[str]) -> GovernanceResult:
    cfg = state.request.agent_config
    if not cfg.governance_policies:
        return GovernanceResult(decision=Decision.PROCEED, reason="no policies")
    classifications: dict[str, str] = {}
    for source in state.request.data_source_metadata:
        for table in source.schemas:
            if table.classification:
                classifications[table.table_name] = table.classification
    return checker.check_query_result(
        facts=call_facts(state, tool, arguments), rows=rows, tables=tables, classifications=classifications
    )


def auto_approved(state: RunState, tool_name: str, facts: dict) -> str | None:
    """The matching auto-approve condition for this tool, if any."""
    for rule in state.request.agent_config.approval_rules.auto_approve_conditions:
        if rule.tool == tool_name and checker.auto_approve_matches(condition=rule.condition, facts=facts):
            return rule.condition
    return None

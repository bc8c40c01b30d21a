"""The engine's side of governance: builds the facts from run state and asks the
policy checker, a port. Decisions themselves live behind it (``governance.checker``
in River, installed when the governance app is ready); with no checker installed the
gate refuses to run rather than let a call through unchecked."""

from __future__ import annotations

from typing import Any, Protocol

from rivercore.ports import Installed
from rivercore.state import RunState
from rivercore.tools import Tool
from rivercore.types.governance import CallFacts, Decision, GovernancePolicySpec, GovernanceResult


class PolicyChecker(Protocol):
    """Decides on a call, a model turn and a query result against the agent's policies."""

    def check_tool_call(self, facts: CallFacts) -> GovernanceResult: ...

    def check_llm_call(self, *, policies: list[GovernancePolicySpec], tokens_used: int, org_id: int,
                       workspace_id: int, agent_id: str, execution_id: int) -> GovernanceResult: ...

    def check_query_result(self, *, facts: CallFacts, rows: int, tables: list[str],
                           classifications: dict[str, str]) -> GovernanceResult: ...

    def auto_approve_matches(self, *, condition: str, facts: dict[str, Any]) -> bool: ...


_checker: Installed[PolicyChecker] = Installed("policy checker", "the engine will not run calls unchecked")
# River's governance app installs governance.checker in ready(); without one the gate refuses.
policy_checker_install = _checker.install
policy_checker = _checker.get


def call_facts(state: RunState, tool: Tool, arguments: dict[str, Any], *, confidence: float | None = None) -> CallFacts:
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


def before_tool(checker: PolicyChecker, state: RunState, tool: Tool, arguments: dict[str, Any], *,
                confidence: float | None) -> GovernanceResult:
    return checker.check_tool_call(call_facts(state, tool, arguments, confidence=confidence))


def before_llm(checker: PolicyChecker, state: RunState) -> GovernanceResult:
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


def after_query(checker: PolicyChecker, state: RunState, tool: Tool, arguments: dict[str, Any], *, rows: int,
                tables: list[str]) -> GovernanceResult:
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


def auto_approved(checker: PolicyChecker, state: RunState, tool_name: str, facts: dict[str, Any]) -> str | None:
    """The matching auto-approve condition for this tool, if any."""
    for rule in state.request.agent_config.approval_rules.auto_approve_conditions:
        if rule.tool == tool_name and checker.auto_approve_matches(condition=rule.condition, facts=facts):
            return rule.condition
    return None

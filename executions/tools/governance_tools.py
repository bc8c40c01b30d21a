"""Governance tools: check_governance (reasoning, no model call) and
apply_governance_policy (execution, writes through the policy service)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from executions.tools.fenced import fenced_in_transaction
from governance import checker
from governance.selectors import active_policies
from governance.services import policy_create
from rivercore.errors import InvalidInput, NotFound, PermissionDenied
from rivercore.tools import Tool, ToolCategory, ToolContext, ToolError, ToolErrorKind, get_tool, register
from rivercore.types.governance import CallFacts, Decision, GovernancePolicySpec, PolicyType
from tenancy.selectors import user_active_get

# --- check_governance --------------------------------------------------------------

READ_OPERATIONS = {"query", "read", "select", "search", "explain", "list", "view", "describe"}
WRITE_OPERATIONS = {"write", "insert", "update", "create", "send", "post", "upsert", "modify"}
DELETE_OPERATIONS = {"delete", "drop", "remove", "truncate"}


class CheckGovernanceInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    intent_type: str = Field(min_length=1, description="The classified intent (e.g. DATA_QUERY).")
    data_source_ids: list[int] | None = Field(default=None, description="Data sources to check access for.")
    requested_operation: str = Field(
        min_length=1, description='Operation type ("query", "write", "delete") or the name of a tool.'
    )


class CheckGovernanceOutput(BaseModel):
    allowed: bool
    reason: str
    constraints: dict = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


def _target(operation: str, intent_type: str) -> tuple[str, bool, str | None, str | None]:
    """(tool name, writes, permission, warning) for a requested operation.

    A registered tool name is taken as is; otherwise the operation maps to the tool
    that would carry it out (data source management intents to the data source tools).
    """
    op = operation.strip().lower()
    tool = get_tool(op)
    if tool is not None:
        return tool.name, tool.writes, tool.permission, None
    manages_sources = "DATA_SOURCE" in intent_type.upper()
    warning = None
    if op in READ_OPERATIONS:
        name, writes = "execute_query", False
    elif op in DELETE_OPERATIONS:
        name, writes = ("delete_data_source" if manages_sources else "write_back"), True
    elif op in WRITE_OPERATIONS:
        name = "write_back"
        if manages_sources:
            name = "create_data_source" if op == "create" else "update_data_source"
        writes = True
    else:
        name, writes = "write_back", True
        warning = f"Unknown operation {operation!r}: checked as a write."
    registered = get_tool(name)
    return name, writes, registered.permission if registered else None, warning


def _policies(ctx: ToolContext) -> list[GovernancePolicySpec]:
    bound = list(ctx.agent.governance_policies)
    seen = {p.policy_id for p in bound if p.policy_id}
    stored = active_policies(org_id=ctx.user.org_id, workspace_id=ctx.user.workspace_id)
    return bound + [p for p in stored if p.policy_id not in seen]


def _expression(policy: GovernancePolicySpec) -> str:
    try:
        return checker.conditions_expression(policy.conditions)
    except ValueError:
        return str(policy.conditions)


def check_governance(ctx: ToolContext, args: CheckGovernanceInput) -> CheckGovernanceOutput:
    tool_name, writes, permission, warning = _target(args.requested_operation, args.intent_type)
    warnings = [warning] if warning else []
    policies = _policies(ctx)
    attributes = ctx.user.attributes or {}
    facts = CallFacts(
        tool_name=tool_name,
        tool_category=ToolCategory.EXECUTION.value,
        writes=writes,
        arguments={},
        action_level=ctx.agent.action_level.value,
        require_approval_for=ctx.agent.approval_rules.require_approval_for,
        policies=policies,
        org_id=ctx.user.org_id,
        workspace_id=ctx.user.workspace_id,
        agent_id=str(ctx.agent.agent_id),
        execution_id=ctx.execution_id,
        user_id=ctx.user.user_id,
        tokens_used=int(ctx.extras.get("tokens_used") or 0),
        time_zone=str(attributes.get("time_zone") or "UTC"),
    )
    verdict = checker.check_tool_call(facts, count=False)  # a dry run: consumes no rate-limit budget
    warnings += verdict.warnings
    allowed = verdict.decision in (Decision.PROCEED, Decision.APPROVAL_REQUIRED)
    reason = verdict.reason

    if allowed and permission and permission not in ctx.user.permissions:
        allowed, reason = False, f"The user lacks the {permission} permission needed for {tool_name}."

    sources = {s.data_source_id: s for s in ctx.data_sources}
    source_constraints = []
    for source_id in args.data_source_ids or []:
        source = sources.get(source_id)
        if source is None:
            allowed = False
            reason = f"Data source {source_id} is not connected to this agent."
            continue
        source_constraints.append(
            {"data_source_id": source_id, "access_level": source.access_level, "status": source.status}
        )
        if writes and source.access_level == "read_only":
            allowed = False
            reason = f"Data source {source_id} is read-only; {args.requested_operation!r} needs write access."

    constraints = {
        "decision": verdict.decision.value,
        "action_level": facts.action_level,
        "requires_approval": verdict.decision == Decision.APPROVAL_REQUIRED,
        "tool": tool_name,
        "writes": writes,
        "row_limits": [
            {"policy": p.name, "condition": _expression(p), "enforcement": p.enforcement.value}
            for p in policies
            if checker.policy_type_of(p) == PolicyType.DATA_EXPORT_LIMIT
        ],
        "policies": [
            {"name": m.name, "policy_type": m.policy_type.value, "enforcement": m.enforcement.value,
             "condition": m.expression}
            for m in verdict.matched
        ],
        "data_sources": source_constraints,
    }
    return CheckGovernanceOutput(allowed=allowed, reason=reason, constraints=constraints, warnings=warnings)


CHECK_GOVERNANCE = register(
    Tool(
        name="check_governance",
        description=(
            "Check whether an operation is permitted for this agent before attempting it: action level, "
            "approval rules, active governance policies and data source access."
        ),
        category=ToolCategory.REASONING,
        input_model=CheckGovernanceInput,
        output_model=CheckGovernanceOutput,
        handler=check_governance,
        idempotent=True,
    )
)


# --- apply_governance_policy -------------------------------------------------------


class ApplyGovernancePolicyInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, description="Policy name.")
    description: str | None = Field(default=None, description="Policy description.")
    scope: Literal["organization", "workspace"] = Field(description='"organization" or "workspace".')
    conditions: dict | str = Field(
        description="Policy condition expression: {\"expression\": \"rows > 10000 AND table.classification == "
        "'pii'\"} or the keyed form {\"rows_gt\": 10000, \"table_classification\": \"pii\"}."
    )
    enforcement: Literal["block", "require_approval", "warn", "log_only"]
    policy_type: (
        Literal["budget", "rate_limit", "data_export_limit", "time_window", "tool_restriction", "content"] | None
    ) = Field(default=None, description="Defaults to the type the condition implies.")


class ApplyGovernancePolicyOutput(BaseModel):
    success: bool
    policy_id: str | None = None
    message: str


def apply_governance_policy(ctx: ToolContext, args: ApplyGovernancePolicyInput) -> ApplyGovernancePolicyOutput:
    actor = user_active_get(user_id=ctx.user.user_id)
    if actor is None:
        raise ToolError(ToolErrorKind.FORBIDDEN, "The calling user is not active.")
    try:
        policy = policy_create(
            actor=actor,
            scope=args.scope,
            name=args.name,
            description=args.description or "",
            conditions=args.conditions,
            enforcement=args.enforcement,
            policy_type=args.policy_type,
            workspace_id=ctx.user.workspace_id,
            organization_id=ctx.user.org_id if args.scope == "organization" else None,
        )
    except InvalidInput as exc:
        raise ToolError(ToolErrorKind.VALIDATION, exc.message, details=exc.details) from None
    except PermissionDenied as exc:
        raise ToolError(ToolErrorKind.FORBIDDEN, exc.message) from None
    except NotFound as exc:
        raise ToolError(ToolErrorKind.NOT_FOUND, exc.message) from None
    return ApplyGovernancePolicyOutput(
        success=True,
        policy_id=str(policy.pk),
        message=f"Created {policy.scope} policy {policy.name!r} ({policy.policy_type}, {policy.enforcement}): "
        f"{policy.conditions['expression']}",
    )


APPLY_GOVERNANCE_POLICY = register(
    Tool(
        name="apply_governance_policy",
        description="Create a governance policy (organization or workspace scope) with a condition and enforcement.",
        category=ToolCategory.EXECUTION,
        input_model=ApplyGovernancePolicyInput,
        output_model=ApplyGovernancePolicyOutput,
        handler=fenced_in_transaction(apply_governance_policy),
        permission="policy:create",
        writes=True,
    )
)

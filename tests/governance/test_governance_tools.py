"""check_governance and apply_governance_policy, as the engine dispatches them."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from executions.tools.governance_tools import ApplyGovernancePolicyInput, CheckGovernanceInput
from governance.models import AuditLogEntry, Policy
from governance.services import policy_create
from rivercore.contracts import AgentConfig, DataSourceMetadata, UserContext
from rivercore.tools import ToolCategory, ToolContext, ToolError, ToolErrorKind, get_tool
from tenancy.permissions import ALL_PERMISSIONS

EXAMPLE = Path(__file__).resolve().parent.parent / "executions" / "example_execution_request.json"


def _ctx(user, workspace, *, action_level="act_with_approval", permissions=None, policies=None, sources=None,
         attributes=None):
    config = json.loads(EXAMPLE.read_text())["agent_config"]
    config["action_level"] = action_level
    if policies is not None:
        config["governance_policies"] = policies
    return ToolContext(
        execution_id=1,
        user=UserContext(user_id=user.pk, org_id=workspace.organization_id, workspace_id=workspace.pk,
                         roles=["ws_admin"], permissions=permissions or sorted(ALL_PERMISSIONS),
                         attributes=attributes),
        agent=AgentConfig.model_validate(config),
        data_sources=sources or [],
    )


def _check(ctx, **kwargs):
    tool = get_tool("check_governance")
    return tool.handler(ctx, CheckGovernanceInput(**{"intent_type": "DATA_QUERY", **kwargs}))


def test_registered_with_the_spec_facts():
    check, apply = get_tool("check_governance"), get_tool("apply_governance_policy")
    assert (check.category, check.writes, check.permission) == (ToolCategory.REASONING, False, None)
    assert (apply.category, apply.writes, apply.permission) == (ToolCategory.EXECUTION, True, "policy:create")
    assert set(apply.input_model.model_fields) == {"name", "description", "scope", "conditions", "enforcement",
                                                   "policy_type"}
    assert set(apply.output_model.model_fields) == {"success", "policy_id", "message"}
    assert set(check.output_model.model_fields) == {"allowed", "reason", "constraints", "warnings"}


def test_read_is_allowed_and_write_needs_approval(owner, workspace):
    ctx = _ctx(owner, workspace, policies=[])
    read = _check(ctx, requested_operation="query")
    assert read.allowed and read.constraints["decision"] == "PROCEED"
    write = _check(ctx, requested_operation="write")
    assert write.allowed and write.constraints["requires_approval"] is True
    assert write.constraints["decision"] == "APPROVAL_REQUIRED"


def test_read_only_agent_may_not_write(owner, workspace):
    result = _check(_ctx(owner, workspace, action_level="read_only", policies=[]), requested_operation="delete")
    assert not result.allowed
    assert "forbids writes" in result.reason


def test_stored_policies_apply_and_the_check_is_a_dry_run(owner, workspace):
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="No writes",
                  conditions={"tool": "write_back"}, enforcement="block")
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="Hourly cap",
                  conditions={"expression": "agent.tool_calls_this_hour > 1"}, enforcement="block")
    ctx = _ctx(owner, workspace, action_level="automated", policies=[])
    write = _check(ctx, requested_operation="write")
    assert not write.allowed
    assert write.constraints["policies"][0]["name"] == "No writes"
    for _ in range(3):  # the rate counter is not consumed by checking
        assert _check(ctx, requested_operation="query").allowed


def test_data_sources_and_row_limits(owner, workspace):
    spec = {"policy_id": "f9a2c4d6-8b1e-4f7a-a3c5-2d4e6f8b1a3c", "name": "PII Export Limit", "scope": "workspace",
            "conditions": {"rows_gt": 10000, "table_classification": "pii"}, "enforcement": "require_approval"}
    sources = [DataSourceMetadata(data_source_id=14, name="Zendesk", type="postgres", access_level="read_only")]
    ctx = _ctx(owner, workspace, action_level="automated", policies=[spec], sources=sources)
    read = _check(ctx, requested_operation="query", data_source_ids=[14])
    assert read.allowed
    assert read.constraints["row_limits"] == [{"policy": "PII Export Limit", "enforcement": "require_approval",
                                               "condition": "rows > 10000 AND table.classification == 'pii'"}]
    assert read.constraints["data_sources"][0]["access_level"] == "read_only"
    write = _check(ctx, requested_operation="write", data_source_ids=[14])
    assert not write.allowed and "read-only" in write.reason
    missing = _check(ctx, requested_operation="query", data_source_ids=[99])
    assert not missing.allowed and "not connected" in missing.reason


def test_missing_permission_is_not_allowed(owner, workspace):
    ctx = _ctx(owner, workspace, permissions=["workspace:view"], policies=[])
    result = _check(ctx, requested_operation="apply_governance_policy")
    assert not result.allowed and "policy:create" in result.reason


def test_unknown_operation_is_checked_as_a_write(owner, workspace):
    result = _check(_ctx(owner, workspace, action_level="read_only", policies=[]), requested_operation="frobnicate")
    assert not result.allowed
    assert any("checked as a write" in w for w in result.warnings)


def test_apply_creates_through_the_service(owner, workspace):
    tool = get_tool("apply_governance_policy")
    out = tool.handler(_ctx(owner, workspace), ApplyGovernancePolicyInput(
        name="Require Approval Before Sending", scope="workspace", conditions={"tool": "write_back"},
        enforcement="require_approval"))
    assert out.success
    policy = Policy.objects.get(pk=out.policy_id)
    assert policy.conditions == {"expression": "tool.name == 'write_back'"}
    assert policy.policy_type == "tool_restriction" and policy.workspace == workspace
    assert AuditLogEntry.objects.filter(event_type="policy_created", policy_id=policy.pk, actor=owner).exists()


def test_apply_refuses_bad_conditions_with_position(owner, workspace):
    tool = get_tool("apply_governance_policy")
    with pytest.raises(ToolError) as caught:
        tool.handler(_ctx(owner, workspace), ApplyGovernancePolicyInput(
            name="Broken", scope="workspace", conditions={"expression": "cost.tokens >> 5"}, enforcement="warn"))
    assert caught.value.kind == ToolErrorKind.VALIDATION
    assert caught.value.details["position"] == 13
    assert not Policy.objects.exists()


def test_apply_checks_permissions_in_the_database(member, org_admin, workspace):
    tool = get_tool("apply_governance_policy")
    args = ApplyGovernancePolicyInput(name="Mine", scope="workspace", conditions="cost.tokens > 5",
                                      enforcement="warn")
    with pytest.raises(ToolError) as caught:
        tool.handler(_ctx(member, workspace), args)  # the context claims policy:create; the analyst has not
    assert caught.value.kind == ToolErrorKind.FORBIDDEN
    org_wide = ApplyGovernancePolicyInput(name="Org", scope="organization", conditions="cost.tokens > 5",
                                          enforcement="warn", policy_type="budget")
    out = tool.handler(_ctx(org_admin, workspace), org_wide)
    assert Policy.objects.get(pk=out.policy_id).workspace is None


def test_check_governance_uses_workspace_time_zone(owner, workspace, monkeypatch):
    from governance import checker

    seen = {}
    original = checker.time_facts

    def spy(*, now=None, time_zone="UTC"):
        seen["zone"] = time_zone
        return original(now=datetime(2024, 1, 1, tzinfo=UTC), time_zone=time_zone)

    monkeypatch.setattr(checker, "time_facts", spy)
    nine = [{"name": "nine", "policy_type": "time_window", "conditions": {"expression": "time.hour == 9"},
             "enforcement": "block"}]
    # 2024-01-01 00:00 UTC is 09:00 in Tokyo.
    tokyo = _check(_ctx(owner, workspace, policies=nine, attributes={"time_zone": "Asia/Tokyo"}),
                   requested_operation="write")
    assert seen["zone"] == "Asia/Tokyo"
    assert not tokyo.allowed
    assert _check(_ctx(owner, workspace, policies=nine), requested_operation="write").allowed

"""At run time a condition that cannot be evaluated denies, and the denial is audited
with the reason; an auto-approve condition that fails the save-time rules (stored
before they existed) never skips the approval."""

from __future__ import annotations

import pytest

from agents.models import AgentVersion
from executions import services
from executions.models import Execution
from governance.models import ApprovalRequest, AuditLogEntry
from governance.services import policy_create
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_calls():
    approval_tools.reset()


@pytest.mark.parametrize("enforcement", ["log_only", "warn", "require_approval"])
def test_an_unevaluable_policy_blocks_the_call_and_the_decision_is_audited(workspace, owner, enforcement):
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="Note length",
                  conditions={"expression": "args.note > 5"}, enforcement=enforcement, policy_type="content")
    agent = make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="automated")
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Refund ticket 7"))

    outcome = services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([
        tool_reply(WRITE_TOOL, {"ticket_id": 7, "amount": 40.0, "note": "a string, not a number"}, call_id="w"),
        text_reply("Blocked, stopping."),
    ]))

    assert outcome == "success"
    assert approval_tools.CALLS == []
    entry = AuditLogEntry.objects.get(event_type="governance_decision", execution_id=execution.pk,
                                      details__tool_name=WRITE_TOOL)
    assert entry.details["decision"] == "BLOCKED"
    assert "Note length" in entry.details["reason"] and "could not evaluate" in entry.details["reason"]


@pytest.mark.parametrize("condition", ["true", "", "1 == 1", "confidence_score == null", "nonsense >"])
def test_a_stored_auto_approve_condition_that_fails_the_rules_still_asks_a_human(workspace, owner, condition):
    agent = make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="act_with_approval",
                       require_approval_for=[WRITE_TOOL])
    version = agent.current_version
    # Written straight to the row, as a version saved before save-time validation existed would be.
    rules = {**version.approval_rules, "auto_approve_conditions": [{"tool": WRITE_TOOL, "condition": condition}]}
    AgentVersion.objects.filter(pk=version.pk).update(approval_rules=rules)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="Refund ticket 7"))

    outcome = services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([
        tool_reply(WRITE_TOOL, {"ticket_id": 7, "amount": 40.0}, call_id="w")]))

    assert outcome == "awaiting_approval"
    assert Execution.objects.get(pk=execution.pk).status == Execution.Status.AWAITING_APPROVAL
    assert ApprovalRequest.objects.get(execution_id=execution.pk).status == ApprovalRequest.Status.PENDING
    assert not AuditLogEntry.objects.filter(event_type="approval_auto_approved").exists()
    assert approval_tools.CALLS == []


def test_a_write_missing_from_require_approval_for_still_pauses(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="act_with_approval",
                       require_approval_for=[])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="Refund ticket 7"))

    outcome = services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([
        tool_reply(WRITE_TOOL, {"ticket_id": 7, "amount": 40.0}, call_id="w")]))

    assert outcome == "awaiting_approval"
    assert ApprovalRequest.objects.get(execution_id=execution.pk).tool_name == WRITE_TOOL
    assert approval_tools.CALLS == []

"""Approve at the right scope (governance.grants, docs/approvals.md "Scopes and standing
grants"): once, run, session and standing grants, on durable runs driven as a worker
drives them (execution_run_segment with a scripted model)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, Literal
from unittest import mock

import pytest
from django.utils import timezone
from pydantic import BaseModel, ConfigDict

from executions import services, tasks
from executions.models import Execution
from executions.services import replay, sessions
from governance.models import ApprovalGrant, ApprovalRequest, AuditLogEntry, Policy
from rivercore.tools import Tool, ToolCategory, get_tool, register
from tenancy.models import Membership
from tenancy.permissions import Role
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL

pytestmark = pytest.mark.django_db

TABLE_TOOL = "scopes_test_table_write"
TABLE_CALLS: list[dict] = []
_lock = threading.Lock()


class TableWriteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data_source_id: int
    table_name: str
    operation: Literal["insert", "update", "delete"]
    data: dict[str, Any] | list[dict[str, Any]]
    conditions: dict[str, Any] | None = None


class TableWriteOut(BaseModel):
    rows_affected: int


def _table_write(ctx, args: TableWriteIn) -> TableWriteOut:
    with _lock:
        TABLE_CALLS.append(args.model_dump(exclude_none=True))
    return TableWriteOut(rows_affected=len(args.data) if isinstance(args.data, list) else 1)


if get_tool(TABLE_TOOL) is None:
    register(Tool(name=TABLE_TOOL, description="Write rows to a table (writes).", category=ToolCategory.EXECUTION,
                  input_model=TableWriteIn, output_model=TableWriteOut, handler=_table_write, writes=True))

REFUND_A = {"ticket_id": 7, "amount": 40.0}
REFUND_B = {"ticket_id": 8, "amount": 40.0}
INSERT_ONE = {"data_source_id": 3, "table_name": "tickets", "operation": "insert", "data": {"status": "open"}}
GRANT = {"expires_in_days": 7, "max_rows": 5, "condition": "args.operation == 'insert'"}


@pytest.fixture(autouse=True)
def _clean_calls():
    approval_tools.reset()
    TABLE_CALLS.clear()
    yield
    approval_tools.reset()
    TABLE_CALLS.clear()


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL, TABLE_TOOL],
                      action_level="act_with_approval", approver_roles=["admin", "editor"])


@pytest.fixture
def requester(workspace):
    return approval_tools.requester_in(workspace)


def start(agent, user, llm, *, session=None) -> Execution:
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=user, prompt="Do the work"))
    if session is not None:
        Execution.objects.filter(pk=execution.pk).update(session=session)
    with mock.patch.object(tasks.run_segment, "delay"):
        services.execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()
    return execution


def resume(execution, llm) -> Execution:
    with mock.patch.object(tasks.run_segment, "delay"):
        services.execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()
    return execution


def pending_of(execution) -> ApprovalRequest:
    return ApprovalRequest.objects.get(execution_id=execution.pk, status=ApprovalRequest.Status.PENDING)


def resolve(client, approval, **body):
    with mock.patch.object(tasks.run_segment, "delay"):
        return client.post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved", **body}, format="json")


def scope_uses(execution) -> list[AuditLogEntry]:
    return list(AuditLogEntry.objects.filter(execution_id=execution.pk, event_type="approval_scope_used"))


def granted(agent, requester, owner, api_client_for, *, grant=GRANT, args=INSERT_ONE) -> ApprovalGrant:
    """A first run pauses on ``args``; the owner approves it with a standing grant."""
    first = start(agent, requester, ScriptedLLM([tool_reply(TABLE_TOOL, args, call_id="c1"), text_reply("ok")]))
    response = resolve(api_client_for(owner), pending_of(first), scope="grant", grant=grant)
    assert response.status_code == 200, response.json()
    assert response.json()["scope"] == "grant"
    return ApprovalGrant.objects.get(approval__execution_id=first.pk)


def second_run(agent, user, tool, args) -> Execution:
    return start(agent, user, ScriptedLLM([tool_reply(tool, args, call_id="later"), text_reply("done")]))


# --- run and session --------------------------------------------------------------------


def test_run_scope_lets_the_next_identical_call_through_and_a_different_call_still_pauses(
    agent, requester, owner, api_client_for
):
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, REFUND_A, call_id="c1"), tool_reply(WRITE_TOOL, REFUND_A, call_id="c2"),
                       tool_reply(WRITE_TOOL, REFUND_B, call_id="c3"), text_reply("done")])
    execution = start(agent, requester, llm)
    first = pending_of(execution)

    response = resolve(api_client_for(owner), first, scope="run")
    assert response.status_code == 200, response.json()
    assert response.json()["scope"] == "run"
    execution = resume(execution, llm)

    # c1 ran on the approval, c2 (identical) ran without asking, c3 (another ticket) waits.
    assert approval_tools.calls_of(WRITE_TOOL) == [{**REFUND_A, "note": ""}] * 2
    assert execution.status == Execution.Status.AWAITING_APPROVAL
    assert pending_of(execution).tool_call_id == "c3"
    [used] = scope_uses(execution)
    assert used.details["call_id"] == "c2" and used.details["scope"] == "run"
    assert used.details["text"] == "allowed by owner's approval for the rest of this run"
    assert str(used.approval_id) == str(first.pk)
    check = execution.steps.get(step_type="governance_check", call_id="c2")
    assert check.status == "completed" and check.output["resolution"]["standing"] is True


def test_run_scope_does_not_reach_another_run(agent, requester, owner, api_client_for):
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, REFUND_A, call_id="c1"), text_reply("done")])
    execution = start(agent, requester, llm)
    assert resolve(api_client_for(owner), pending_of(execution), scope="run").status_code == 200
    resume(execution, llm)

    other = second_run(agent, requester, WRITE_TOOL, REFUND_A)
    assert other.status == Execution.Status.AWAITING_APPROVAL
    assert scope_uses(other) == []


def test_session_scope_covers_the_conversations_later_runs_only(agent, requester, owner, workspace, api_client_for):
    session = sessions.session_create(workspace=workspace, agent=agent, user=requester)
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, REFUND_A, call_id="c1"), text_reply("done")])
    first = start(agent, requester, llm, session=session)
    assert resolve(api_client_for(owner), pending_of(first), scope="session").status_code == 200
    assert resume(first, llm).status == Execution.Status.COMPLETED

    same_session = start(agent, requester, ScriptedLLM([tool_reply(WRITE_TOOL, REFUND_A, call_id="s2"),
                                                        text_reply("done")]), session=session)
    assert same_session.status == Execution.Status.COMPLETED
    [used] = scope_uses(same_session)
    assert used.details["text"] == "allowed by owner's approval for the rest of this conversation"

    elsewhere = second_run(agent, requester, WRITE_TOOL, REFUND_A)
    assert elsewhere.status == Execution.Status.AWAITING_APPROVAL
    assert len(approval_tools.calls_of(WRITE_TOOL)) == 2


# --- standing grants --------------------------------------------------------------------


def test_a_grant_lets_a_later_run_through_and_every_use_is_audited(agent, requester, owner, api_client_for):
    grant = granted(agent, requester, owner, api_client_for)
    assert (grant.tool_name, grant.data_source_id, grant.target, grant.max_rows) == (TABLE_TOOL, 3, "tickets", 5)
    assert AuditLogEntry.objects.filter(event_type="approval_grant_created", actor=owner).count() == 1

    later = second_run(agent, requester, TABLE_TOOL, {**INSERT_ONE, "data": [{"status": "open"}] * 2})

    assert later.status == Execution.Status.COMPLETED
    assert TABLE_CALLS[-1]["data"] == [{"status": "open"}] * 2
    [used] = scope_uses(later)
    assert used.details["grant_id"] == grant.pk
    assert used.details["text"].startswith(f"allowed by grant #{grant.pk} from owner, expires ")
    grant.refresh_from_db()
    assert grant.uses == 1 and grant.last_used_at is not None


@pytest.mark.parametrize("tool,args", [
    (TABLE_TOOL, {**INSERT_ONE, "table_name": "refunds"}),  # another table
    (TABLE_TOOL, {**INSERT_ONE, "data_source_id": 4}),  # the same table name in another source
    (WRITE_TOOL, REFUND_A),  # another tool
    (TABLE_TOOL, {**INSERT_ONE, "data": [{"status": "open"}] * 6}),  # more rows than the ceiling
    (TABLE_TOOL, {**INSERT_ONE, "operation": "update", "conditions": {"id": 1}}),  # rows unknown; condition fails
    (TABLE_TOOL, {**INSERT_ONE, "operation": "delete", "data": {}, "conditions": {"id": 1}}),
], ids=["other-table", "other-source", "other-tool", "row-ceiling", "update", "delete"])
def test_a_grant_does_not_cover_other_calls(agent, requester, owner, api_client_for, tool, args):
    granted(agent, requester, owner, api_client_for)
    later = second_run(agent, requester, tool, args)
    assert later.status == Execution.Status.AWAITING_APPROVAL
    assert scope_uses(later) == []


def test_row_ceiling_alone_makes_an_update_ask(agent, requester, owner, api_client_for):
    # No condition: an update's rows are unknown before it runs, so the grant cannot vouch for them.
    granted(agent, requester, owner, api_client_for, grant={"expires_in_days": 1, "max_rows": 100})
    later = second_run(agent, requester, TABLE_TOOL, {**INSERT_ONE, "operation": "update", "conditions": {"id": 1}})
    assert later.status == Execution.Status.AWAITING_APPROVAL


def test_a_grant_does_not_cover_another_agent(agent, requester, owner, workspace, api_client_for):
    granted(agent, requester, owner, api_client_for)
    other_agent = make_agent(workspace=workspace, owner=owner, name="Other", tools=[TABLE_TOOL],
                             action_level="act_with_approval")
    later = second_run(other_agent, requester, TABLE_TOOL, INSERT_ONE)
    assert later.status == Execution.Status.AWAITING_APPROVAL


def test_a_grant_expires(agent, requester, owner, api_client_for):
    grant = granted(agent, requester, owner, api_client_for)
    eight_days_on = timezone.now() + timedelta(days=8)
    with mock.patch("governance.grants.timezone.now", return_value=eight_days_on):
        later = second_run(agent, requester, TABLE_TOOL, INSERT_ONE)
    assert later.status == Execution.Status.AWAITING_APPROVAL
    body = api_client_for(owner).get(f"/api/v1/approval-grants/{grant.pk}/").json()
    assert body["state"] == "active"  # not yet, in real time
    ApprovalGrant.objects.filter(pk=grant.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api_client_for(owner).get(f"/api/v1/approval-grants/{grant.pk}/").json()["state"] == "expired"


def test_a_revoked_grant_lets_nothing_through(agent, requester, owner, api_client_for):
    grant = granted(agent, requester, owner, api_client_for)
    response = api_client_for(owner).post(f"/api/v1/approval-grants/{grant.pk}/revoke")
    assert response.status_code == 200 and response.json()["state"] == "revoked"
    assert response.json()["revoked_by"]["id"] == owner.pk
    assert api_client_for(owner).post(f"/api/v1/approval-grants/{grant.pk}/revoke").status_code == 409
    assert AuditLogEntry.objects.filter(event_type="approval_grant_revoked").count() == 1

    later = second_run(agent, requester, TABLE_TOOL, INSERT_ONE)
    assert later.status == Execution.Status.AWAITING_APPROVAL


def test_a_grant_never_lets_the_grantor_through_in_their_own_run(agent, requester, owner, api_client_for):
    granted(agent, requester, owner, api_client_for)
    own = second_run(agent, owner, TABLE_TOOL, INSERT_ONE)
    assert own.status == Execution.Status.AWAITING_APPROVAL
    assert scope_uses(own) == []


def test_a_grant_stops_when_its_grantor_may_no_longer_approve(agent, requester, owner, workspace, api_client_for):
    granted(agent, requester, owner, api_client_for)
    Membership.objects.filter(workspace=workspace, user=owner).update(role=Role.ANALYST)
    later = second_run(agent, requester, TABLE_TOOL, INSERT_ONE)
    assert later.status == Execution.Status.AWAITING_APPROVAL


def test_a_policy_block_is_never_overridden_by_a_grant(agent, requester, owner, org, workspace, api_client_for):
    granted(agent, requester, owner, api_client_for)
    Policy.objects.create(organization=org, workspace=workspace, scope="workspace", name="No tickets writes",
                          policy_type="tool_restriction", enforcement="block",
                          conditions={"expression": "args.table_name == 'tickets'"})
    later = second_run(agent, requester, TABLE_TOOL, INSERT_ONE)
    assert later.status == Execution.Status.COMPLETED  # the model was told it is blocked, and answered
    assert TABLE_CALLS == []  # the first run's approved call was never resumed here; the second was blocked
    assert later.steps.filter(step_type="governance_check", status="blocked").exists()
    assert scope_uses(later) == []


def test_replay_treats_a_grant_allowed_call_as_recorded(agent, requester, owner, api_client_for, monkeypatch):
    granted(agent, requester, owner, api_client_for)
    later = second_run(agent, requester, TABLE_TOOL, INSERT_ONE)
    assert later.status == Execution.Status.COMPLETED
    uses_before = AuditLogEntry.objects.filter(event_type="approval_scope_used").count()
    ApprovalGrant.objects.update(revoked_at=timezone.now())  # the replay must not ask the live grants
    monkeypatch.setattr("executions.services.segment.llm_for_execution", lambda e: pytest.fail("model called"))

    row = replay.execution_replay(execution=later, user=owner)

    assert row.result["deterministic"] is True, row.result["non_determinism"]
    assert row.result["paused_on"] is None
    assert AuditLogEntry.objects.filter(event_type="approval_scope_used").count() == uses_before
    assert len(TABLE_CALLS) == 1  # the later run's one write; the replay wrote nothing


# --- refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize("body,field", [
    ({"scope": "forever"}, "scope"),
    ({"scope": "grant"}, "grant"),
    ({"scope": "run", "grant": GRANT}, "grant"),
    ({"scope": "grant", "grant": {**GRANT, "expires_in_days": 31}}, "grant.expires_in_days"),
    ({"scope": "grant", "grant": {**GRANT, "expires_in_days": 0}}, "grant.expires_in_days"),
    ({"scope": "grant", "grant": {**GRANT, "max_rows": "many"}}, "grant.max_rows"),
    ({"scope": "grant", "grant": {"expires_in_days": 1}}, "grant.max_rows"),
    ({"scope": "grant", "grant": {**GRANT, "condition": "args.operation =="}}, "grant.condition"),
    ({"scope": "grant", "grant": {**GRANT, "condition": "agent.id == 'x'"}}, "grant.condition"),
    ({"scope": "grant", "grant": {**GRANT, "condition": "args.operation == 'delete'"}}, "grant.condition"),
    ({"scope": "grant", "grant": {**GRANT, "until": "tomorrow"}}, "grant.until"),
    ({"status": "rejected", "scope": "run"}, "scope"),
])
def test_bad_scopes_are_a_400_naming_the_field_and_change_nothing(agent, requester, owner, api_client_for, body,
                                                                    field):
    first = start(agent, requester, ScriptedLLM([tool_reply(TABLE_TOOL, INSERT_ONE, call_id="c1")]))
    response = resolve(api_client_for(owner), pending_of(first), **body)
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["details"], response.json()
    assert pending_of(first).scope == "once"
    assert ApprovalGrant.objects.count() == 0


@pytest.mark.parametrize("body", [{"scope": "run"}, {"scope": "session"}, {"scope": "grant", "grant": GRANT}])
def test_a_request_needing_several_approvers_is_decided_for_its_own_call_only(agent, requester, owner,
                                                                              api_client_for, body):
    """One person's wider scope would let later calls skip the other approvers (quorum)."""
    first = start(agent, requester, ScriptedLLM([tool_reply(TABLE_TOOL, INSERT_ONE, call_id="c1")]))
    approval = pending_of(first)
    ApprovalRequest.objects.filter(pk=approval.pk).update(required_approvals=2)
    response = resolve(api_client_for(owner), approval, **body)
    assert response.status_code == 400, response.json()
    assert "scope" in response.json()["error"]["details"]
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING and approval.scope == "once"
    assert not approval.votes.exists() and ApprovalGrant.objects.count() == 0


def test_only_approvers_may_grant(agent, requester, owner, member, outsider, api_client_for):
    first = start(agent, requester, ScriptedLLM([tool_reply(TABLE_TOOL, INSERT_ONE, call_id="c1")]))
    approval = pending_of(first)
    assert resolve(api_client_for(member), approval, scope="grant", grant=GRANT).status_code == 403
    assert resolve(api_client_for(outsider), approval, scope="grant", grant=GRANT).status_code == 404
    assert resolve(api_client_for(requester), approval, scope="grant", grant=GRANT).status_code == 403
    assert ApprovalGrant.objects.count() == 0 and pending_of(first).status == "pending"


def test_grants_api_is_tenant_scoped_and_revoking_needs_an_approver(
    agent, requester, owner, member, editor, outsider, api_client_for
):
    grant = granted(agent, requester, owner, api_client_for)
    listed = api_client_for(member).get("/api/v1/approval-grants/?state=active").json()
    assert [g["id"] for g in listed["results"]] == [grant.pk]
    assert listed["results"][0]["granted_by"]["name"] == "owner"
    assert api_client_for(outsider).get("/api/v1/approval-grants/").json()["results"] == []
    assert api_client_for(outsider).get(f"/api/v1/approval-grants/{grant.pk}/").status_code == 404
    assert api_client_for(outsider).post(f"/api/v1/approval-grants/{grant.pk}/revoke").status_code == 404
    assert api_client_for(member).post(f"/api/v1/approval-grants/{grant.pk}/revoke").status_code == 403
    assert api_client_for(owner).get("/api/v1/approval-grants/?state=bogus").status_code == 400
    assert api_client_for(owner).get("/api/v1/approval-grants/nope/").status_code == 404
    # Another approver of such requests may revoke it, not only its grantor.
    assert api_client_for(editor).post(f"/api/v1/approval-grants/{grant.pk}/revoke").status_code == 200

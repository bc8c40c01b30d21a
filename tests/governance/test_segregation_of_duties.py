"""Segregation of duties: whoever started a run may not approve, reject or edit its
approvals (API, pages, inbox, the stateless contract), unless the workspace allows
self-approval; the switch is for workspace admins and is audited."""

from __future__ import annotations

from unittest import mock

import pytest
from django.test import Client

from executions import services, tasks
from executions.models import Execution
from governance.models import ApprovalRequest, AuditLogEntry
from tenancy.models import AccessToken
from tenancy.services import token_issue
from tests.factories import ScriptedLLM, make_agent, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL

pytestmark = pytest.mark.django_db

PROPOSED = {"ticket_id": 7, "amount": 40.0}
DECISIONS = [
    {"status": "approved"},
    {"status": "rejected", "resolution_comment": "no"},
    {"status": "edited_approved", "modified_args": {"ticket_id": 7, "amount": 1.0}},
]


@pytest.fixture(autouse=True)
def _clean_calls():
    approval_tools.reset()


def paused_run_started_by(starter, workspace, owner, *, via_api_client=None):
    """A run of an act_with_approval agent started by ``starter``, paused on a write."""
    agent = make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="act_with_approval",
                       require_approval_for=[WRITE_TOOL], approver_roles=["admin", "editor"])
    if via_api_client is not None:
        with mock.patch.object(tasks.run_segment, "delay"):
            response = via_api_client.post(f"/api/v1/agents/{agent.pk}/run", {"input_prompt": "Refund 7"},
                                           format="json")
        assert response.status_code == 202, response.content
        execution = Execution.objects.get(pk=response.json()["execution_id"])
    else:
        execution = services.execution_start(agent=agent, request=services.person_run_request(
            agent=agent, user=starter, prompt="Refund ticket 7"))
    services.execution_run_segment(
        execution_id=execution.pk, llm=ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund")])
    )
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    assert approval.run_started_by_id == starter.pk
    return execution, approval


def _resolve(client, approval, body):
    with mock.patch.object(tasks.run_segment, "delay"):
        return client.post(f"/api/v1/approvals/{approval.pk}/resolve", body, format="json")


def _untouched(execution, approval):
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING and approval.resolved_by_id is None
    assert Execution.objects.get(pk=execution.pk).status == Execution.Status.AWAITING_APPROVAL
    assert not AuditLogEntry.objects.filter(approval_id=approval.pk, event_type__in=[
        "approval_approved", "approval_rejected", "approval_edited"]).exists()
    assert approval_tools.CALLS == []


@pytest.mark.parametrize("body", DECISIONS, ids=[d["status"] for d in DECISIONS])
def test_the_runs_starter_cannot_resolve_it_through_the_api(workspace, owner, api_client_for, body):
    execution, approval = paused_run_started_by(owner, workspace, owner)

    response = _resolve(api_client_for(owner), approval, body)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "self_approval_forbidden"
    assert "started this run" in response.json()["error"]["message"]
    _untouched(execution, approval)


def test_a_run_started_with_a_token_cannot_be_approved_by_the_same_person_in_the_browser(
    workspace, owner, api_client_for
):
    execution, approval = paused_run_started_by(owner, workspace, owner, via_api_client=api_client_for(owner))
    browser = Client()
    browser.force_login(owner)

    with mock.patch.object(tasks.run_segment, "delay"):
        response = browser.post(f"/approvals/{approval.pk}/resolve", {"decision": "approved"},
                                HTTP_HX_REQUEST="true")

    assert response.status_code == 403
    assert b"started this run" in response.content
    page = browser.get(f"/approvals/{approval.pk}/")
    assert b"another approver must decide" in page.content
    assert b'value="approved"' not in page.content  # no button offered
    _untouched(execution, approval)


def test_a_second_token_of_the_starter_is_refused_too(workspace, owner, api_client_for):
    execution, approval = paused_run_started_by(owner, workspace, owner, via_api_client=api_client_for(owner))
    service = token_issue(user=owner, kind=AccessToken.Kind.SERVICE)
    client = api_client_for(None)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {service.plaintext}")

    assert _resolve(client, approval, {"status": "approved"}).status_code == 403
    _untouched(execution, approval)


def test_inbox_and_approval_list_do_not_offer_the_starter_their_own_run(workspace, owner, editor, api_client_for):
    _, approval = paused_run_started_by(owner, workspace, owner)

    own = api_client_for(owner).get("/api/v1/approvals/?status=pending").json()
    others = api_client_for(editor).get("/api/v1/approvals/?status=pending").json()
    own_ids = [row["id"] for row in own.get("results", own)]
    other_ids = [row["id"] for row in others.get("results", others)]

    assert str(approval.pk) not in own_ids
    assert str(approval.pk) in other_ids
    browser = Client()
    browser.force_login(owner)
    assert str(approval.pk).encode() not in browser.get("/approvals/").content


def test_another_approver_resolves_it(workspace, owner, editor, api_client_for):
    execution, approval = paused_run_started_by(owner, workspace, owner)

    response = _resolve(api_client_for(editor), approval, {"status": "approved"})

    assert response.status_code == 200, response.json()
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED and approval.resolved_by_id == editor.pk


def test_the_workspace_switch_allows_self_approval(workspace, owner, api_client_for):
    workspace.allow_self_approval = True
    workspace.save(update_fields=["allow_self_approval"])
    execution, approval = paused_run_started_by(owner, workspace, owner)

    response = _resolve(api_client_for(owner), approval, {"status": "approved"})

    assert response.status_code == 200, response.json()
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED and approval.resolved_by_id == owner.pk


def test_role_rules_still_apply_to_someone_who_did_not_start_the_run(workspace, owner, member, api_client_for):
    _, approval = paused_run_started_by(owner, workspace, owner)

    response = _resolve(api_client_for(member), approval, {"status": "approved"})

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"


# --- the workspace switch -----------------------------------------------------------------


def _settings_url(workspace) -> str:
    return f"/api/v1/workspaces/{workspace.pk}/approval-settings"


def test_workspace_admin_turns_self_approval_on_and_it_is_audited(workspace, owner, api_client_for):
    client = api_client_for(owner)
    assert client.get(_settings_url(workspace)).json() == {"workspace_id": workspace.pk,
                                                           "allow_self_approval": False}

    response = client.patch(_settings_url(workspace), {"allow_self_approval": True}, format="json")

    assert response.status_code == 200 and response.json()["allow_self_approval"] is True
    workspace.refresh_from_db()
    assert workspace.allow_self_approval is True
    entry = AuditLogEntry.objects.get(event_type="workspace_approval_settings_changed", workspace=workspace)
    assert entry.actor_id == owner.pk
    assert entry.details == {"allow_self_approval": {"from": False, "to": True}}
    assert client.get(f"/api/v1/workspaces/{workspace.pk}/").json()["allow_self_approval"] is True


def test_only_admins_change_the_switch(workspace, editor, outsider, org_admin, api_client_for):
    body = {"allow_self_approval": True}
    assert api_client_for(editor).patch(_settings_url(workspace), body, format="json").status_code == 403
    assert api_client_for(outsider).patch(_settings_url(workspace), body, format="json").status_code == 404
    workspace.refresh_from_db()
    assert workspace.allow_self_approval is False
    assert api_client_for(org_admin).patch(_settings_url(workspace), body, format="json").status_code == 200


@pytest.mark.parametrize("value", ["true", 1, 0, "yes", None, [], {"x": True}])
def test_the_switch_takes_only_a_boolean(workspace, owner, api_client_for, value):
    response = api_client_for(owner).patch(_settings_url(workspace), {"allow_self_approval": value}, format="json")

    assert response.status_code == 400
    assert "allow_self_approval" in response.json()["error"]["details"]
    workspace.refresh_from_db()
    assert workspace.allow_self_approval is False


def test_unknown_fields_are_refused_by_name(workspace, owner, api_client_for):
    response = api_client_for(owner).patch(
        _settings_url(workspace), {"allow_self_approval": True, "query_row_limit": 5}, format="json"
    )

    assert response.status_code == 400
    assert "query_row_limit" in response.json()["error"]["details"]
    workspace.refresh_from_db()
    assert workspace.allow_self_approval is False


def test_the_starter_is_not_notified_to_approve_their_own_run(workspace, owner, editor):
    from governance.models import Notification, WorkspaceSettings
    from governance.notifications import approval_notifications_send

    WorkspaceSettings.objects.update_or_create(
        workspace=workspace, defaults={"approval_notification_config": {"in_app": {"enabled": True}}})
    _, approval = paused_run_started_by(owner, workspace, owner)
    Notification.objects.all().delete()

    approval_notifications_send(approval_id=approval.pk)

    assert set(Notification.objects.values_list("user__username", flat=True)) == {"editor"}
    workspace.allow_self_approval = True
    workspace.save(update_fields=["allow_self_approval"])
    Notification.objects.all().delete()
    approval_notifications_send(approval_id=approval.pk)
    assert set(Notification.objects.values_list("user__username", flat=True)) == {"editor", "owner"}


def test_the_stateless_continue_refuses_the_runs_own_user_as_approver(workspace, org_admin):
    from executions.stateless import execute, execute_continue
    from rivercore.contracts import ContinuationRequest
    from rivercore.errors import PermissionDenied
    from tests.executions import engine_support

    request = engine_support.request_for(tools=["test_write"], action_level="act_with_approval")
    request.user_context.org_id, request.user_context.workspace_id = workspace.organization_id, workspace.pk
    request.user_context.user_id = org_admin.pk
    paused = execute(user=org_admin, auth=None, request=request,
                     llm=ScriptedLLM([tool_reply("test_write", {"text": "x"}, call_id="w")]))
    assert paused.status.value == "awaiting_approval"

    def resolve(resolved_by: str):
        return execute_continue(user=org_admin, auth=None, llm=ScriptedLLM([tool_reply("finalize", {"answer": "ok"})]),
                                continuation=ContinuationRequest.model_validate({
                                    "execution_id": paused.execution_id, "continuation_type": "approval_resolved",
                                    "approval_resolution": {"status": "approved", "resolved_by": resolved_by},
                                    "serialized_state": paused.serialized_state}))

    engine_support.CALLS.clear()
    with pytest.raises(PermissionDenied) as refused:
        resolve(f" {org_admin.pk}")
    assert refused.value.code == "self_approval_forbidden"
    assert engine_support.CALLS == []
    assert resolve("someone-else").status.value == "success"
    assert engine_support.CALLS == [("test_write", {"text": "x"})]

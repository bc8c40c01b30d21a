"""POST /api/v1/execute and /execute/continue: the stateless contract over HTTP."""

import json

import pytest

from tenancy.models import AccessToken
from tenancy.services import token_issue
from tests.executions import engine_support as support


@pytest.fixture(autouse=True)
def _reset_calls():
    support.CALLS.clear()


@pytest.fixture
def model(fake_openai, settings):
    server = fake_openai()
    settings.RIVER_LLM_MODEL = "fake-model"
    settings.RIVER_LLM_BASE_URL = server.base_url
    return server


def body_for(workspace, user, **kwargs) -> dict:
    request = support.request_for(**kwargs)
    data = request.model_dump(mode="json", by_alias=True)
    data["user_context"].update({"org_id": workspace.organization_id, "workspace_id": workspace.pk,
                                 "user_id": user.pk})
    return data


def test_execute_runs_a_whole_execution(model, org_admin, workspace, api_client_for):
    model.tool_call("test_echo", {"text": "hello"}).text("Echoed hello.")
    response = api_client_for(org_admin).post("/api/v1/execute", body_for(workspace, org_admin, tools=["test_echo"]),
                                              format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "success"
    assert body["result"]["summary"] == "Echoed hello."
    assert [s["step_type"] for s in body["steps"]][-1] == "final_answer"
    assert body["usage"]["total_turns"] == 2
    assert "messages" not in body["steps"][0]


def test_bad_request_names_each_bad_field(org_admin, workspace, api_client_for):
    data = body_for(workspace, org_admin, tools=["test_echo"])
    data["agent_config"]["action_level"] = "yolo"
    del data["trigger_context"]["triggered_at"]
    response = api_client_for(org_admin).post("/api/v1/execute", data, format="json")
    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert "agent_config.action_level" in details and "trigger_context.triggered_at" in details


def test_workspace_member_without_org_admin_or_service_token_is_refused(owner, workspace, api_client_for):
    response = api_client_for(owner).post("/api/v1/execute", body_for(workspace, owner, tools=["test_echo"]),
                                          format="json")
    assert response.status_code == 403


def test_service_token_of_a_member_may_execute(model, owner, workspace, client):
    model.text("Nothing to do.")
    token = token_issue(user=owner, kind=AccessToken.Kind.SERVICE).plaintext
    response = client.post("/api/v1/execute", json.dumps(body_for(workspace, owner, tools=["test_echo"])),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content


def test_outsider_gets_404_for_another_organizations_workspace(outsider, workspace, api_client_for):
    response = api_client_for(outsider).post("/api/v1/execute", body_for(workspace, outsider, tools=["test_echo"]),
                                             format="json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_run_never_gets_more_permissions_than_the_caller(model, owner, workspace, api_client_for):
    """A service token of a viewer cannot hand the run data_source:update."""
    from tenancy.models import Membership

    Membership.objects.filter(user=owner, workspace=workspace).update(role="viewer")
    token = token_issue(user=owner, kind=AccessToken.Kind.SERVICE).plaintext
    model.tool_call("test_write", {"text": "x"}).text("Could not write.")
    data = body_for(workspace, owner, tools=["test_write"])
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = client.post("/api/v1/execute", data, format="json").json()
    observation = [s for s in body["steps"] if s["step_type"] == "observation"][0]
    assert observation["output"]["error"]["code"] == "GOVERNANCE_BLOCKED"
    assert support.CALLS == []


def _pause(model, org_admin, workspace, api_client_for):
    model.tool_call("test_write", {"text": "original"}, call_id="w1")
    data = body_for(workspace, org_admin, tools=["test_write"], action_level="act_with_approval",
                    require_approval_for=["test_write"])
    response = api_client_for(org_admin).post("/api/v1/execute", data, format="json")
    body = response.json()
    assert body["status"] == "awaiting_approval", body
    assert body["approval_request"]["tool_name"] == "test_write"
    assert body["approval_request"]["proposed_payload"] == {"text": "original"}
    assert support.CALLS == []
    return body


def _continue(client, body, resolution):
    return client.post("/api/v1/execute/continue", {
        "execution_id": body["execution_id"], "continuation_type": "approval_resolved",
        "approval_resolution": {"resolved_by": "approver-7", **resolution},
        "serialized_state": body["serialized_state"],
    }, format="json")


def test_pause_and_approve_through_continue(model, org_admin, workspace, api_client_for):
    client = api_client_for(org_admin)
    paused = _pause(model, org_admin, workspace, api_client_for)
    model.text("Written after approval.")
    response = _continue(client, paused, {"status": "approved"})
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "success"
    assert support.CALLS == [("test_write", {"text": "original"})]


def test_edited_arguments_replace_the_originals_for_tool_and_model(model, org_admin, workspace, api_client_for):
    client = api_client_for(org_admin)
    paused = _pause(model, org_admin, workspace, api_client_for)
    model.text("Wrote the edited text.")
    response = _continue(client, paused, {"status": "edited_approved", "modified_args": {"text": "edited"}})
    assert response.json()["status"] == "success"
    assert support.CALLS == [("test_write", {"text": "edited"})]
    seen = json.dumps(model.requests[-1]["messages"])
    assert "edited" in seen and "original" not in seen


def test_rejection_reaches_the_model_and_the_run_goes_on(model, org_admin, workspace, api_client_for):
    client = api_client_for(org_admin)
    paused = _pause(model, org_admin, workspace, api_client_for)
    model.text("Understood, not writing.")
    response = _continue(client, paused, {"status": "rejected", "resolution_comment": "wrong customer"})
    assert response.json()["status"] == "success"
    assert support.CALLS == []
    assert "wrong customer" in model.requests[-1]["messages"][-1]["content"]


def test_tampered_state_is_refused(model, org_admin, workspace, api_client_for):
    client = api_client_for(org_admin)
    paused = _pause(model, org_admin, workspace, api_client_for)
    tampered = dict(paused, serialized_state=paused["serialized_state"][:-3] + "abc")
    response = _continue(client, tampered, {"status": "approved"})
    assert response.status_code == 400
    assert "serialized_state" in response.json()["error"]["details"]
    assert support.CALLS == []


def test_ask_user_pauses_and_continue_delivers_the_answer(model, org_admin, workspace, api_client_for):
    client = api_client_for(org_admin)
    model.tool_call("ask_user", {"interaction_type": "clarification_request", "message": "Which one?",
                                 "options": ["A", "B"]}, call_id="q1")
    data = body_for(workspace, org_admin, tools=["ask_user"])
    paused = client.post("/api/v1/execute", data, format="json").json()
    assert paused["status"] == "awaiting_interaction"
    assert paused["interaction_request"]["options"] == ["A", "B"]
    bad = client.post("/api/v1/execute/continue", {
        "execution_id": paused["execution_id"], "continuation_type": "interaction_response",
        "interaction_response": {"user_response": "C"}, "serialized_state": paused["serialized_state"]},
        format="json")
    assert bad.status_code == 400 and "user_response" in bad.json()["error"]["details"]
    model.text("You chose B.")
    done = client.post("/api/v1/execute/continue", {
        "execution_id": paused["execution_id"], "continuation_type": "interaction_response",
        "interaction_response": {"user_response": "B"}, "serialized_state": paused["serialized_state"]},
        format="json").json()
    assert done["status"] == "success"
    assert '"user_response": "B"' in model.requests[-1]["messages"][-1]["content"]

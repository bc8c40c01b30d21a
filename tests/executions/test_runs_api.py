"""The durable run endpoints: start, list, detail, events, cancel, respond."""

import logging

import pytest

from executions.models import Execution
from executions.services import execution_run_segment
from tenancy.models import Membership
from tests.executions import engine_support  # noqa: F401 - registers the test tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, tools=["test_echo", "ask_user"])


def test_run_returns_202_and_queues_after_commit(agent, member, api_client_for, django_capture_on_commit_callbacks):
    from unittest import mock

    with mock.patch("executions.tasks.run_segment.delay") as delay, \
            django_capture_on_commit_callbacks(execute=True):
        response = api_client_for(member).post(f"/api/v1/agents/{agent.pk}/run",
                                               {"input_prompt": "hi", "payload": {"k": 1}}, format="json")
    assert response.status_code == 202
    execution_id = response.json()["execution_id"]
    delay.assert_called_once_with(execution_id)
    execution = Execution.objects.get(pk=execution_id)
    assert execution.status == "queued" and execution.trigger_payload == {"k": 1}
    # The run stores its context by reference; the request is built from it when loaded.
    assert set(execution.context) == {"triggered_at"}
    from executions.services.load import request_build

    request = request_build(execution)
    assert request.agent_config.name == agent.name and request.trigger_context.trigger_payload == {"k": 1}
    assert request.user_context.user_id == member.pk and request.input_prompt == "hi"


def test_run_of_inactive_agent_is_refused_with_a_logged_reason(agent, member, api_client_for, caplog):
    agent.status = "paused"
    agent.save(update_fields=["status"])
    with caplog.at_level(logging.WARNING, logger="river.executions"):
        response = api_client_for(member).post(f"/api/v1/agents/{agent.pk}/run", {"input_prompt": "hi"},
                                               format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "agent_not_active"
    assert "refused: agent is paused" in caplog.text
    assert not Execution.objects.exists()


def test_viewer_may_not_run(agent, member, workspace, api_client_for):
    Membership.objects.filter(user=member, workspace=workspace).update(role="viewer")
    response = api_client_for(member).post(f"/api/v1/agents/{agent.pk}/run", {}, format="json")
    assert response.status_code == 403


def test_an_org_admin_runs_without_a_workspace_membership_and_a_member_elsewhere_does_not(
    agent, org_admin, outsider, api_client_for, monkeypatch
):
    """The agent, its workspace's visibility and the caller's permissions are one query."""
    from executions import tasks

    monkeypatch.setattr(tasks.run_segment, "delay", lambda *args: None)
    response = api_client_for(org_admin).post(f"/api/v1/agents/{agent.pk}/run", {"input_prompt": "x"}, format="json")
    assert response.status_code == 202
    assert Execution.objects.get(pk=response.json()["execution_id"]).requested_by == org_admin
    # A member of another organization's workspace with every role there sees nothing here.
    Membership.objects.filter(user=outsider).update(role="admin")
    assert api_client_for(outsider).post(f"/api/v1/agents/{agent.pk}/run", {}, format="json").status_code == 404


def test_outsider_gets_404_everywhere(agent, owner, outsider, api_client_for):
    from executions.services import execution_start, person_run_request

    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="x"))
    client = api_client_for(outsider)
    assert client.post(f"/api/v1/agents/{agent.pk}/run", {}, format="json").status_code == 404
    for path in (f"/api/v1/executions/{execution.pk}/", f"/api/v1/executions/{execution.pk}/events/"):
        assert client.get(path).status_code == 404
    for path in (f"/api/v1/executions/{execution.pk}/cancel", f"/api/v1/executions/{execution.pk}/respond"):
        assert client.post(path, {"user_response": "x"}, format="json").status_code == 404
    assert client.get("/api/v1/executions/").json()["count"] == 0


def test_detail_lists_steps_and_events_replay_after_a_seq(agent, owner, api_client_for):
    from executions.services import execution_start, person_run_request

    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="x"))
    execution_run_segment(execution_id=execution.pk,
                          llm=ScriptedLLM([tool_reply("test_echo", {"text": "a"}), text_reply("done")]))
    client = api_client_for(owner)
    detail = client.get(f"/api/v1/executions/{execution.pk}/").json()
    assert detail["status"] == "completed"
    assert [s["step_type"] for s in detail["steps"]][-1] == "final_answer"
    events = client.get(f"/api/v1/executions/{execution.pk}/events/?after=2").json()
    assert [e["seq"] for e in events] == list(range(3, 3 + len(events)))
    assert events[-1]["type"] == "run_completed" and events[-1]["execution_id"] == execution.pk
    assert client.get("/api/v1/executions/?status=completed").json()["count"] == 1
    assert client.get("/api/v1/executions/?status=failed").json()["count"] == 0


def test_cancel_and_cancel_again(agent, owner, api_client_for):
    from executions.services import execution_start, person_run_request

    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="x"))
    client = api_client_for(owner)
    assert client.post(f"/api/v1/executions/{execution.pk}/cancel").json()["status"] == "cancelled"
    again = client.post(f"/api/v1/executions/{execution.pk}/cancel")
    assert again.status_code == 409


def test_respond_validates_options_and_resumes(agent, owner, api_client_for):
    from executions.services import execution_start, person_run_request

    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="x"))
    question = {"interaction_type": "clarification_request", "message": "Which?", "options": ["A", "B"]}
    assert execution_run_segment(execution_id=execution.pk,
                                 llm=ScriptedLLM([tool_reply("ask_user", question, "q1")])) == "awaiting_interaction"
    client = api_client_for(owner)
    detail = client.get(f"/api/v1/executions/{execution.pk}/").json()
    assert detail["pending"]["interaction"]["options"] == ["A", "B"]
    bad = client.post(f"/api/v1/executions/{execution.pk}/respond", {"user_response": "C"}, format="json")
    assert bad.status_code == 400 and "user_response" in bad.json()["error"]["details"]
    missing = client.post(f"/api/v1/executions/{execution.pk}/respond", {"user_response": ""}, format="json")
    assert missing.status_code == 400
    ok = client.post(f"/api/v1/executions/{execution.pk}/respond", {"user_response": "B"}, format="json")
    assert ok.status_code == 202 and ok.json()["status"] == "queued"
    llm = ScriptedLLM([text_reply("You chose B.")])
    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    assert '"user_response": "B"' in llm.requests[0]["messages"][-1]["content"]
    twice = client.post(f"/api/v1/executions/{execution.pk}/respond", {"user_response": "A"}, format="json")
    assert twice.status_code == 409

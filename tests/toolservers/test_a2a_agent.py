"""A remote A2A agent as a governed tool (docs/a2a.md, "Calling a remote A2A agent"),
against an agent built with the ``a2a-sdk``'s own server classes on 127.0.0.1
(tests/toolservers/a2a_remote.py): register, discover from the card, review, a run that
pauses for approval at act_with_approval and gets the remote answer after it, refused at
read_only, a changed card disabling the tool, the remote's end states as errors, a remote
that is down or too slow, the host allow-list before any connection, an outsider's 404."""

from __future__ import annotations

import pytest

from executions import services
from executions.models import Execution
from governance.models import ApprovalRequest, AuditLogEntry
from governance.resolution import approval_resolve
from rivercore.contracts import StepType
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from toolservers.models import McpTool, ToolServer

from .a2a_remote import RemoteAgent

pytestmark = pytest.mark.django_db(transaction=True)  # the tool thread reads the committed tool rows

URL = "/api/v1/tool-servers/"
SECRET = "rtk-remote-secret-123"
RIVER_NAME = "mcp:ledger/ask"
MODEL_NAME = "mcp__ledger__ask"


@pytest.fixture(autouse=True)
def _loopback_allowed(settings):
    settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.RIVER_MCP_TIMEOUT_SECONDS = 20.0


@pytest.fixture
def remote():
    agent = RemoteAgent().start()
    yield agent
    agent.stop()


@pytest.fixture
def approver(workspace):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    user = get_user_model().objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


def register(client, workspace, url, **extra):
    body = {"workspace": workspace.pk, "name": "ledger", "transport": "a2a", "url": url}
    body.update(extra)
    return client.post(URL, body, format="json")


def registered(client, workspace, remote) -> dict:
    response = register(client, workspace, remote.url, headers={"X-API-Key": SECRET})
    assert response.status_code == 201, response.content
    return response.json()


def reviewed(client, workspace, remote, action_class="write") -> dict:
    server = registered(client, workspace, remote)
    assert client.post(f"{URL}{server['id']}/discover").status_code == 200
    response = client.patch(
        f"{URL}{server['id']}/tools/ask", {"action_class": action_class, "enabled": True}, format="json"
    )
    assert response.status_code == 200, response.content
    return server


def run(agent, owner, llm, prompt="go") -> tuple[Execution, str]:
    execution = services.execution_start(
        agent=agent, request=services.person_run_request(agent=agent, user=owner, prompt=prompt)
    )
    status = services.execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()
    return execution, status


def observation(execution):
    return execution.steps.filter(step_type=StepType.OBSERVATION, tool_name=RIVER_NAME).order_by("step_number").last()


def asks(message: str, answer: str = "Done.") -> ScriptedLLM:
    return ScriptedLLM([tool_reply(MODEL_NAME, {"message": message}, call_id="a1"), text_reply(answer)])


def test_discovery_reads_the_card_into_one_unreviewed_write_suggested_ask_tool(
    api_client_for, owner, workspace, remote
):
    client = api_client_for(owner)
    server = registered(client, workspace, remote)
    assert server["transport"] == "a2a" and server["secret_names"] == ["X-API-Key"] and SECRET not in str(server)
    response = client.post(f"{URL}{server['id']}/discover")
    assert response.status_code == 200, response.content
    [tool] = response.json()["tools"]
    assert tool["name"] == "ask" and tool["river_name"] == RIVER_NAME
    assert tool["suggested_class"] == "write" and tool["action_class"] == "" and tool["usable"] is False
    assert "Ledger Agent" in tool["description"] and "skill ledger" in tool["description"]
    assert tool["input_schema"]["required"] == ["message"]
    assert remote.headers and all(h.get("x-api-key") == SECRET for h in remote.headers)
    assert SECRET not in str(response.json())
    assert remote.messages == []  # discovery sends no message


def test_a_card_claiming_read_only_does_not_lower_the_suggestion(api_client_for, owner, workspace, remote):
    remote.card.description = "Read-only. readOnlyHint: true. Never changes anything."
    client = api_client_for(owner)
    server = registered(client, workspace, remote)
    [tool] = client.post(f"{URL}{server['id']}/discover").json()["tools"]
    assert tool["suggested_class"] == "write" and "readOnlyHint" not in tool["annotations"]


def test_a_run_pauses_for_approval_then_gets_the_remote_answer(api_client_for, owner, approver, workspace, remote):
    reviewed(api_client_for(owner), workspace, remote)
    agent = make_agent(workspace=workspace, owner=owner, tools=[RIVER_NAME], action_level="act_with_approval")
    llm = asks("How many entries today?", "There are 3.")
    execution, status = run(agent, owner, llm)
    assert status == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    assert approval.tool_name == RIVER_NAME and approval.proposed_payload["message"] == "How many entries today?"
    assert remote.messages == []  # nothing sent before the approval
    approval_resolve(user=approver, approval_id=approval.pk, status="approved", comment="ok")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    assert remote.messages == ["How many entries today?"]  # exactly once
    seen = observation(execution)
    assert seen.status == "completed", seen.output
    result = seen.output["result"]
    assert result["content"] == [{"type": "text", "text": "answer: How many entries today?"}]
    assert result["structured"] == {"data": [{"count": 3}]}
    [call] = AuditLogEntry.objects.filter(event_type="mcp_tool.called", execution_id=execution.pk)
    assert call.details["transport"] == "a2a" and call.details["remote_state"] == "completed"
    assert call.details["writes"] is True and SECRET not in str(call.details)


@pytest.mark.parametrize("level", ["read_only", "recommend"])
def test_a_write_classed_remote_agent_is_refused_below_act(api_client_for, owner, workspace, remote, level):
    reviewed(api_client_for(owner), workspace, remote)
    agent = make_agent(workspace=workspace, owner=owner, tools=[RIVER_NAME], action_level=level)
    execution, status = run(agent, owner, asks("Change the ledger"))
    assert status == "success"
    assert observation(execution).status == "blocked"
    assert remote.messages == []
    assert not AuditLogEntry.objects.filter(event_type="mcp_tool.called").exists()


def test_an_admin_may_class_it_read_by_an_explicit_review(api_client_for, owner, workspace, remote):
    reviewed(api_client_for(owner), workspace, remote, action_class="read")
    agent = make_agent(workspace=workspace, owner=owner, tools=[RIVER_NAME], action_level="read_only")
    execution, status = run(agent, owner, asks("How many?"))
    assert status == "success"
    assert observation(execution).status == "completed"
    assert remote.messages == ["How many?"]


@pytest.mark.parametrize(
    ("message", "state", "said"),
    [("more details", "input-required", "Which ticket?"), ("fail please", "failed", "The ledger is closed.")],
)
def test_a_remote_task_not_completed_is_an_error_naming_its_state(
    api_client_for, owner, workspace, remote, message, state, said
):
    reviewed(api_client_for(owner), workspace, remote, action_class="read")
    agent = make_agent(workspace=workspace, owner=owner, tools=[RIVER_NAME], action_level="read_only")
    execution, status = run(agent, owner, asks(message))
    assert status == "success"  # the run goes on; the model sees the error
    seen = observation(execution)
    assert seen.status == "failed"
    error = seen.output["error"]["message"]
    assert f"ended in state {state}" in error and said in error
    [call] = AuditLogEntry.objects.filter(event_type="mcp_tool.called", execution_id=execution.pk)
    assert call.details["outcome"] == "error" and call.details["remote_state"] == state


def test_a_remote_too_slow_or_down_is_an_error_observation_not_a_stuck_run(
    api_client_for, owner, workspace, remote, settings
):
    server = reviewed(api_client_for(owner), workspace, remote, action_class="read")
    agent = make_agent(workspace=workspace, owner=owner, tools=[RIVER_NAME], action_level="read_only")
    settings.RIVER_MCP_TIMEOUT_SECONDS = 1.0
    remote.slow_seconds = 5.0
    execution, status = run(agent, owner, asks("slow question"))
    assert status == "success"
    slow = observation(execution)
    assert slow.status == "failed" and "did not answer in time" in slow.output["error"]["message"]
    remote.stop()
    execution, status = run(agent, owner, asks("anyone there?"))
    assert status == "success"
    down = observation(execution)
    assert down.status == "failed" and "remote agent" in down.output["error"]["message"]
    assert ToolServer.objects.get(pk=server["id"]).health == ToolServer.Health.ERROR


def test_a_changed_card_disables_the_tool_until_reviewed_again(api_client_for, owner, workspace, remote):
    client = api_client_for(owner)
    server = reviewed(client, workspace, remote)
    remote.card.skills[0].description = "Reads the ledger. Also wires money anywhere."
    [tool] = client.post(f"{URL}{server['id']}/discover").json()["tools"]
    assert tool["state"] == "changed" and tool["usable"] is False
    assert any(line.startswith("+") and "wires money" in line for line in tool["diff"])
    assert any(line.startswith("-") and "Reads the ledger." in line for line in tool["diff"])
    again = client.patch(f"{URL}{server['id']}/tools/ask", {"action_class": "write", "enabled": True}, format="json")
    assert again.json()["usable"] is True


def test_a_card_pointing_its_endpoint_at_another_host_is_refused(api_client_for, owner, workspace):
    remote = RemoteAgent(interface_host="127.0.0.2").start()
    try:
        client = api_client_for(owner)
        server = registered(client, workspace, remote)
        response = client.post(f"{URL}{server['id']}/discover")
        assert response.status_code == 409, response.content
        assert "not on the registered URL's host" in response.json()["error"]["message"]
        assert not McpTool.objects.exists()
    finally:
        remote.stop()


def test_garbage_at_the_card_url_is_a_409_not_a_500(api_client_for, owner, workspace, http_mcp):
    client = api_client_for(owner)
    response = register(client, workspace, http_mcp.url)  # an MCP server, not an A2A agent
    assert response.status_code == 201
    discovered = client.post(f"{URL}{response.json()['id']}/discover")
    assert discovered.status_code == 409 and "remote agent" in discovered.json()["error"]["message"]


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5/a2a/agents/1/",
        "http://169.254.169.254/.well-known/agent-card.json",
        "http://[::1]:9/",
        "file:///etc/passwd",
        "http://user:pw@127.0.0.1/",
    ],
)
def test_a_url_outside_the_host_allow_list_is_refused_before_connecting(api_client_for, owner, workspace, url):
    response = register(api_client_for(owner), workspace, url)
    assert response.status_code == 400, response.content
    assert "url" in response.json()["error"]["details"]
    assert not ToolServer.objects.exists()


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"command": "/bin/sh"}, "command"),
        ({"env": {"A": "b"}}, "env"),
        ({"headers": {"A2A-Version": "0.1"}}, "headers.A2A-Version"),
        ({"headers": {"X-A": "a\r\nB: c"}}, "headers.X-A"),
    ],
)
def test_hostile_a2a_input_is_a_400_naming_the_field(api_client_for, owner, workspace, remote, extra, field):
    response = register(api_client_for(owner), workspace, remote.url, **extra)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]


def test_an_outsider_gets_404_and_an_editor_403(api_client_for, owner, outsider, editor, workspace, remote):
    server = registered(api_client_for(owner), workspace, remote)
    stranger = api_client_for(outsider)
    assert stranger.get(f"{URL}{server['id']}/").status_code == 404
    assert stranger.post(f"{URL}{server['id']}/discover").status_code == 404
    assert (
        stranger.patch(f"{URL}{server['id']}/tools/ask", {"action_class": "read", "enabled": True}, format="json")
    ).status_code == 404
    member = api_client_for(editor)
    assert member.post(f"{URL}{server['id']}/discover").status_code == 403
    assert register(member, workspace, remote.url, name="mine").status_code == 403
    assert remote.headers == []  # none of them reached the remote agent

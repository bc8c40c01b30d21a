"""Another River's agents as governed tools of this River's agents: ``runriver`` on
127.0.0.1 (conftest.live_river, a database of its own) is the remote side, reached with
one of its API keys as an encrypted header; this test's workspace registers its Support
Analyst and L1 Support Specialist as ``a2a`` tool servers (docs/a2a.md, "Calling a remote
A2A agent")."""

from __future__ import annotations

import httpx
import pytest

from executions import services
from governance.models import ApprovalRequest, AuditLogEntry
from governance.resolution import approval_resolve
from rivercore.contracts import StepType
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

URL = "/api/v1/tool-servers/"
QUESTION = "How many open high-priority tickets were created in the last 24 hours?"
CLOSE = "Close the open high-priority tickets created in the last 24 hours"


@pytest.fixture(autouse=True)
def _loopback_allowed(settings):
    settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.RIVER_MCP_TIMEOUT_SECONDS = 120.0


def remote_agent_url(live_river, name: str) -> str:
    listed = httpx.get(f"{live_river.url}/a2a/agents/", headers=live_river.bearer("admin")).json()["agents"]
    [card] = [card for card in listed if card["name"] == name]
    return card["supportedInterfaces"][0]["url"]


def reviewed(client, workspace, live_river, *, name: str, remote: str) -> dict:
    response = client.post(
        URL,
        {
            "workspace": workspace.pk,
            "name": name,
            "transport": "a2a",
            "url": remote_agent_url(live_river, remote),
            "headers": {"X-API-Key": live_river.credentials["admin_key"]},
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    server = response.json()
    discovered = client.post(f"{URL}{server['id']}/discover")
    assert discovered.status_code == 200, discovered.content
    [tool] = discovered.json()["tools"]
    assert tool["name"] == "ask" and tool["suggested_class"] == "write" and remote in tool["description"]
    assert live_river.credentials["admin_key"] not in str(discovered.json())
    review = client.patch(f"{URL}{server['id']}/tools/ask", {"action_class": "write", "enabled": True}, format="json")
    assert review.status_code == 200, review.content
    return server


def asked(workspace, owner, tool: str, message: str):
    agent = make_agent(workspace=workspace, owner=owner, tools=[tool], action_level="act_with_approval")
    llm = ScriptedLLM(
        [tool_reply(tool.replace("mcp:", "mcp__").replace("/", "__"), {"message": message}), text_reply("ok")]
    )
    execution = services.execution_start(
        agent=agent, request=services.person_run_request(agent=agent, user=owner, prompt="ask them")
    )
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    assert approval.tool_name == tool and approval.proposed_payload["message"] == message
    return execution, approval, llm


@pytest.fixture
def approver(workspace):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    user = get_user_model().objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


def test_a_run_asks_another_rivers_agent_after_approval_and_gets_its_answer(
    live_river, api_client_for, owner, approver, workspace
):
    reviewed(api_client_for(owner), workspace, live_river, name="analyst", remote="Support Analyst")
    execution, approval, llm = asked(workspace, owner, "mcp:analyst/ask", QUESTION)
    approval_resolve(user=approver, approval_id=approval.pk, status="approved", comment="ok")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    seen = execution.steps.get(step_type=StepType.OBSERVATION, tool_name="mcp:analyst/ask")
    assert seen.status == "completed", seen.output
    result = seen.output["result"]
    assert result["content"][0]["text"]  # the remote agent's answer
    [query] = result["structured"]["data"]
    assert query["sql"].lower().startswith("select")
    [call] = AuditLogEntry.objects.filter(event_type="mcp_tool.called", execution_id=execution.pk)
    assert call.details["remote_state"] == "completed" and call.details["transport"] == "a2a"


def test_a_remote_run_paused_for_its_own_approval_is_an_input_required_error(
    live_river, api_client_for, owner, approver, workspace
):
    live_river.tickets_topped_up()
    reviewed(api_client_for(owner), workspace, live_river, name="specialist", remote="L1 Support Specialist")
    execution, approval, llm = asked(workspace, owner, "mcp:specialist/ask", CLOSE)
    approval_resolve(user=approver, approval_id=approval.pk, status="approved", comment="ok")
    # An approved write that fails ends the run failed (rivercore.runner), naming why.
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "failed"
    execution.refresh_from_db()
    seen = execution.steps.get(step_type=StepType.OBSERVATION, tool_name="mcp:specialist/ask")
    assert seen.status == "failed"
    error = seen.output["error"]["message"]
    assert "ended in state input-required" in error and f"{live_river.url}/approvals/" in error
    assert execution.error["details"]["approved_call_failed"] is True

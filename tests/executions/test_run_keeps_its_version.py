"""A run keeps the version it was created with for its whole life: paused for
approval on v1, resumed after v2 was deployed, it finishes on v1 (v1's instructions,
v1's tools, v1's write). The same holds for a run that drew a canary's version after
the canary was stopped."""

from __future__ import annotations

from unittest import mock

import pytest

from agents.canary import agent_canary_start, agent_canary_stop
from agents.models import Agent
from agents.services import agent_version_create, agent_version_deploy
from datasources.services import data_source_discover
from executions import services, tasks
from executions.models import Execution
from governance import tasks as governance_tasks
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import sqlite_count
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

CLOSE = {
    "table_name": "tickets",
    "operation": "update",
    "data": {"status": "closed"},
    "conditions": {"status": "open", "priority": "high"},
}
CLOSED = "SELECT count(*) FROM tickets WHERE status = 'closed'"
V2_INSTRUCTIONS = "Version two: never write anything, only read."

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quiet():
    with (
        mock.patch.object(tasks.run_segment, "delay"),
        mock.patch.object(tasks.post_process, "delay"),
        mock.patch.object(governance_tasks.notify_approval, "delay"),
    ):
        yield


@pytest.fixture
def source(sqlite_source, sqlite_file):
    data_source_discover(data_source=sqlite_source)
    sqlite_source.closed = lambda: sqlite_count(sqlite_file, CLOSED)
    return sqlite_source


@pytest.fixture
def agent(workspace, owner, source):
    return make_agent(
        workspace=workspace,
        owner=owner,
        tools=["write_back"],
        action_level="act_with_approval",
        require_approval_for=["write_back"],
        approver_roles=["admin", "editor"],
        data_sources=[source],
    )


def _v2(agent, owner):
    return agent_version_create(
        agent=agent,
        actor=owner,
        goal="Read only.",
        instructions=V2_INSTRUCTIONS,
        action_level="read_only",
        tools=["get_workspace_info"],
    )


def _pause(agent, owner, source) -> Execution:
    execution = services.execution_start(
        agent=agent, request=services.person_run_request(agent=agent, user=owner, prompt="Close the open high tickets")
    )
    services.execution_run_segment(
        execution_id=execution.pk, llm=ScriptedLLM([tool_reply("write_back", {"data_source_id": source.pk, **CLOSE})])
    )
    execution.refresh_from_db()
    assert execution.status == Execution.Status.AWAITING_APPROVAL
    return execution


def _system_and_tools(request: dict) -> tuple[str, set[str]]:
    system = next(m["content"] for m in request["messages"] if m["role"] == "system")
    return system, {tool["function"]["name"] for tool in request["tools"]}


def test_a_run_resumed_after_a_deploy_finishes_on_its_version(agent, owner, editor, source):
    execution = _pause(agent, owner, source)
    v1 = execution.agent_version_id

    agent_version_deploy(agent=agent, version=_v2(agent, owner), actor=owner)
    assert Agent.objects.get(pk=agent.pk).current_version.version == 2

    approval_resolve(
        user=editor, approval_id=ApprovalRequest.objects.get(execution_id=execution.pk).pk, status="approved"
    )
    llm = ScriptedLLM([text_reply("Closed 3 tickets.")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    execution.refresh_from_db()
    assert execution.agent_version_id == v1 and execution.agent_version.version == 1
    assert source.closed() == 4  # v1's approved write went through
    system, tools = _system_and_tools(llm.requests[0])
    assert "Be careful." in system and V2_INSTRUCTIONS not in system
    assert "write_back" in tools and "get_workspace_info" not in tools
    # A run started now takes v2.
    fresh = services.execution_start(
        agent=Agent.objects.get(pk=agent.pk),
        request=services.person_run_request(agent=agent, user=owner, prompt="hello"),
    )
    assert fresh.agent_version.version == 2


def test_a_run_that_drew_the_canary_keeps_it_after_the_canary_ends(agent, owner, editor, source, workspace):
    v2 = _v2(agent, owner)
    # Make v1 the canary of a read-only deployed v2, so the paused run is the canary arm's.
    v1 = agent.current_version
    agent_version_deploy(agent=agent, version=v2, actor=owner)
    canary = agent_canary_start(agent=agent, version=v1, actor=owner, percent=50)
    agent.refresh_from_db()
    with mock.patch("executions.services.start.canary_arm_draw", return_value=True):
        execution = _pause(agent, owner, source)
    assert execution.canary_arm and execution.agent_version_id == v1.pk

    agent_canary_stop(canary=canary, actor=owner)
    approval_resolve(
        user=editor, approval_id=ApprovalRequest.objects.get(execution_id=execution.pk).pk, status="approved"
    )
    llm = ScriptedLLM([text_reply("Closed 3 tickets.")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    execution.refresh_from_db()
    assert execution.agent_version_id == v1.pk and execution.canary_arm
    assert source.closed() == 4
    assert "write_back" in _system_and_tools(llm.requests[0])[1]

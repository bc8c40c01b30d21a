"""The requester rule through runs that start runs: a delegated child answers to its
parent's requester, a hand-off's run to the session's owner. The delegation and
transfer tools read the database from the engine's tool threads, so these tests commit
(``transaction=True``)."""

from __future__ import annotations

from unittest import mock

import pytest

from agents.services import agent_team_update
from executions import services as execution_services
from executions.models import Execution
from executions.services import sessions
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL
from tests.governance.test_requester_rule import assert_requester_refused_and_other_decides, paused_on_refund
from triggers import tasks as trigger_tasks
from triggers.services import trigger_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_broker():
    approval_tools.reset()
    with mock.patch("executions.tasks.run_segment.delay"), mock.patch("executions.tasks.post_process.delay"):
        yield
    approval_tools.reset()


def _gated(workspace, owner, name="Refunds"):
    return make_agent(workspace=workspace, owner=owner, name=name, tools=[WRITE_TOOL],
                      action_level="act_with_approval", require_approval_for=[WRITE_TOOL],
                      approver_roles=["admin", "editor"])


def test_a_delegated_run_answers_to_the_parent_runs_requester(workspace, owner, editor):
    """The editor starts Collect by hand; the owner's workflow trigger follows it with the
    Coordinator, which acts as the owner's trigger identity yet answers to the editor.
    The child it delegates to acts as that identity too and still answers to the editor
    (not to the identity's responsible person, the owner)."""
    _gated(workspace, owner)
    collect = make_agent(workspace=workspace, owner=owner, name="Collect")
    coordinator = make_agent(workspace=workspace, owner=owner, name="Coordinator", tools=["delegate_to_agent"],
                             action_level="act_with_approval")
    trigger = trigger_create(actor=owner, workspace=workspace, agent=coordinator, name="after-collect",
                             trigger_type="workflow", prompt="Handle {{ payload.upstream.summary }}",
                             run_as_role="editor", config={"upstream_agent": str(collect.pk)})
    upstream = execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=editor, prompt="Collect tickets"))
    execution_services.execution_run_segment(execution_id=upstream.pk, llm=ScriptedLLM([text_reply("Ticket 7.")]))
    with mock.patch.object(trigger_tasks.pipeline_handoff, "delay",
                           side_effect=lambda handoff_id: trigger_tasks.pipeline_handoff(handoff_id)):
        assert execution_services.execution_post_process(execution_id=upstream.pk) is True
    parent = Execution.objects.get(agent=coordinator)
    assert parent.requested_by_id == trigger.run_as.user_id and parent.requester_id == editor.pk
    delegated = tool_reply("delegate_to_agent", {"agent": "Refunds", "task": "Refund ticket 7"}, "d1")

    status = execution_services.execution_run_segment(execution_id=parent.pk, llm=ScriptedLLM([delegated]))

    assert status == Execution.Status.AWAITING_CHILD
    child = Execution.objects.get(parent_execution_id=parent.pk)
    assert child.requested_by_id == trigger.run_as.user_id  # acts as the parent does
    assert child.requester_id == editor.pk  # answers to the parent's person
    approval = paused_on_refund(child.pk)
    assert approval.run_started_by_id == editor.pk
    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


def test_a_handed_off_run_answers_to_the_sessions_owner(workspace, owner, editor):
    triage = make_agent(workspace=workspace, owner=owner, name="Triage", action_level="act_with_approval")
    refunds = _gated(workspace, owner)
    agent_team_update(agent=refunds, actor=owner, parent_agent_id=triage.pk)
    session = sessions.session_create(workspace=workspace, agent=triage, user=editor)
    _message, first = sessions.session_message_send(session=session, user=editor, content="Refund ticket 7")
    assert first.requester_id == editor.pk
    execution_services.execution_run_segment(execution_id=first.pk, llm=ScriptedLLM([
        tool_reply("transfer_to_agent", {"agent": "Refunds", "reason": "a refund"}, "t1"),
        text_reply("Handed over.")]))
    assert execution_services.execution_post_process(execution_id=first.pk) is True

    session.refresh_from_db()
    handed = Execution.objects.get(pk=session.active_execution_id)
    assert handed.agent_id == refunds.pk and handed.trigger_source == f"handoff:{first.pk}"
    assert handed.requester_id == editor.pk
    approval = paused_on_refund(handed.pk)
    assert approval.run_started_by_id == editor.pk
    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)

"""The authority matrix (issue 24 §6) for runs that start runs: a delegated child acts as
its parent does and answers to the parent's requester; a hand-off's run acts as the
message's sender and answers to the session's owner. Each cell is the person's role ×
unchanged, demoted to each lower role, removed (``tests.governance.authority_matrix``).
The delegation and transfer tools read the database from the engine's tool threads, so
these tests commit (``transaction=True``)."""

from __future__ import annotations

from unittest import mock

import pytest

from agents.services import agent_team_update
from executions import services as execution_services
from executions.models import Execution
from executions.services import sessions
from executions.services.start import person_run_request
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL
from tests.governance.authority_matrix import (
    CELL_IDS,
    CELLS,
    assert_cell,
    assert_run_holds_at_most_the_persons_current_role,
    person_with_role,
)
from tests.governance.test_requester_rule import paused_on_refund

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(autouse=True)
def _no_broker():
    approval_tools.reset()
    # No broker: run and post-processing messages are dropped (the test drives the runs).
    with mock.patch("executions.tasks.run_segment.delay"), mock.patch("executions.tasks.post_process.delay"):
        yield
    approval_tools.reset()


def _gated(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Refunds", tools=[WRITE_TOOL],
                      action_level="act_with_approval", require_approval_for=[WRITE_TOOL],
                      approver_roles=["admin", "editor"])


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_delegation_run_holds_the_persons_current_role_and_never_their_approval(cell, workspace, owner):
    person = person_with_role(workspace=workspace, role=cell.role)
    _gated(workspace, owner)
    coordinator = make_agent(workspace=workspace, owner=owner, name="Coordinator", tools=["delegate_to_agent"],
                             action_level="act_with_approval")
    parent = execution_services.execution_start(
        request=person_run_request(agent=coordinator, user=person, prompt="Refund ticket 7"), agent=coordinator)
    delegated = tool_reply("delegate_to_agent", {"agent": "Refunds", "task": "Refund ticket 7"}, "d1")
    status = execution_services.execution_run_segment(execution_id=parent.pk, llm=ScriptedLLM([delegated]))
    assert status == Execution.Status.AWAITING_CHILD
    child = Execution.objects.get(parent_execution_id=parent.pk)
    assert child.requested_by_id == person.pk  # acts as the parent does

    assert_cell(cell=cell, execution=child, approval=paused_on_refund(child.pk), person=person, approver=owner,
                workspace=workspace)

    assert_run_holds_at_most_the_persons_current_role(parent.pk, cell)  # the parent, waiting on its child


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_hand_off_run_holds_the_persons_current_role_and_never_their_approval(cell, workspace, owner):
    person = person_with_role(workspace=workspace, role=cell.role)
    triage = make_agent(workspace=workspace, owner=owner, name="Triage", action_level="act_with_approval")
    refunds = _gated(workspace, owner)
    agent_team_update(agent=refunds, actor=owner, parent_agent_id=triage.pk)
    session = sessions.session_create(workspace=workspace, agent=triage, user=person)
    _message, first = sessions.session_message_send(session=session, user=person, content="Refund ticket 7")
    execution_services.execution_run_segment(execution_id=first.pk, llm=ScriptedLLM([
        tool_reply("transfer_to_agent", {"agent": "Refunds", "reason": "a refund"}, "t1"),
        text_reply("Handed over.")]))
    assert execution_services.execution_post_process(execution_id=first.pk) is True
    session.refresh_from_db()
    handed = Execution.objects.get(pk=session.active_execution_id)
    assert handed.agent_id == refunds.pk and handed.requested_by_id == person.pk

    assert_cell(cell=cell, execution=handed, approval=paused_on_refund(handed.pk), person=person, approver=owner,
                workspace=workspace)

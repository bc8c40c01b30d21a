"""Agent teams in a session (docs/sessions.md): ``transfer_to_agent`` hands the message to
a child, the parent or a sibling per the transfer flags; the next message goes to the
agent that answered last when it may still take the conversation; a hand-off never
raises the authority the message runs with (such a transfer is refused); every hand-off is an event and an audit
entry; refusals are observations saying why."""

from __future__ import annotations

import pytest

from agents.services import agent_team_update, agent_version_create, agent_version_deploy
from executions import services
from executions.models import Execution, ExecutionEvent, SessionMessage
from executions.services import sessions
from executions.services.load import request_build
from governance.models import AuditLogEntry
from tests.executions.durable_support import WRITE
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)

Status = Execution.Status


def transfer(agent: str, reason: str = "", call_id: str = "t1"):
    return tool_reply("transfer_to_agent", {"agent": agent, "reason": reason}, call_id)


def run(execution: Execution, *replies) -> tuple[str | None, ScriptedLLM]:
    model = ScriptedLLM(list(replies))
    status = services.execution_run_segment(execution_id=execution.pk, llm=model)
    assert services.execution_post_process(execution_id=execution.pk) is True
    execution.refresh_from_db()
    return status, model


def active_run(session) -> Execution:
    session.refresh_from_db()
    assert session.active_execution_id is not None
    return Execution.objects.get(pk=session.active_execution_id)


@pytest.fixture
def team(workspace, owner):
    """Triage (root) with two sub-agents: Billing, and Security, which may not hand back."""
    root = make_agent(workspace=workspace, owner=owner, name="Triage")
    billing = make_agent(workspace=workspace, owner=owner, name="Billing")
    security = make_agent(workspace=workspace, owner=owner, name="Security")
    agent_team_update(agent=billing, actor=owner, parent_agent_id=root.pk)
    agent_team_update(agent=security, actor=owner, parent_agent_id=root.pk, disallow_transfer_to_parent=True)
    return root, billing, security


@pytest.fixture
def session(workspace, owner, team):
    return sessions.session_create(workspace=workspace, agent=team[0], user=owner)


def test_root_hands_to_a_child_which_answers_the_next_message_too(session, owner, team):
    root, billing, _security = team
    _message, first = sessions.session_message_send(session=session, user=owner, content="I was charged twice")
    assert first.agent_id == root.pk
    status, model = run(first, transfer("Billing", "a duplicate charge"))
    assert status == "success" and first.status == Status.COMPLETED
    assert first.result["summary"] == "Handed the conversation to Billing: a duplicate charge"
    offered = {tool["function"]["name"] for tool in model.requests[0]["tools"]}
    assert "transfer_to_agent" in offered  # a team member gets the tool in a session
    assert "## Your team" in model.requests[0]["messages"][0]["content"]

    handed = active_run(session)
    assert handed.agent_id == billing.pk and handed.input_prompt == "I was charged twice"
    event = ExecutionEvent.objects.get(execution=handed, seq=1)
    assert event.event_type == "agent_transferred"
    assert event.payload["from_agent_name"] == "Triage" and event.payload["to_agent_name"] == "Billing"
    assert event.payload["depth"] == 1 and event.payload["reason"] == "a duplicate charge"
    audit = AuditLogEntry.objects.get(event_type="agent_transferred")
    assert audit.execution_id == first.pk and audit.details["to_execution_id"] == handed.pk
    assert request_build(handed).session.handoff.from_agent_name == "Triage"

    run(handed, text_reply("Refunded the duplicate."))
    message = SessionMessage.objects.get(session=session, role="user")
    assert message.state == "answered"
    answers = list(SessionMessage.objects.filter(reply_to=message).order_by("sequence")
                   .values_list("agent__name", "content"))
    assert answers == [("Triage", "Handed the conversation to Billing: a duplicate charge"),
                       ("Billing", "Refunded the duplicate.")]

    _next, second = sessions.session_message_send(session=session, user=owner, content="And the one before?")
    assert second.agent_id == billing.pk  # the agent that answered last keeps the conversation
    assert ExecutionEvent.objects.get(execution=second, seq=1).event_type == "user_message"


def test_a_child_that_may_not_hand_back_keeps_control_and_the_next_message_goes_to_the_root(session, owner, team):
    root, _billing, security = team
    _message, first = sessions.session_message_send(session=session, user=owner, content="My password leaked")
    run(first, transfer("Security"))
    guarded = active_run(session)
    assert guarded.agent_id == security.pk
    team_seen = request_build(guarded).session.team
    assert [member.name for member in team_seen] == ["Billing"]  # a sibling; never its parent

    status, model = run(guarded, transfer(str(root.pk), "not mine"), text_reply("Rotate it now; I reset sessions."))
    assert status == "success"
    refused = guarded.steps.get(step_type="observation", tool_name="transfer_to_agent")
    assert refused.status == "failed"
    assert refused.error.startswith("refused: Security may not hand the conversation back to its parent")
    assert "disallow_transfer_to_parent" in model.requests[1]["messages"][-1]["content"]
    assert guarded.result["summary"] == "Rotate it now; I reset sessions."  # it kept control
    session.refresh_from_db()
    assert session.active_execution_id is None

    # Spec 002: an agent that cannot hand back is not resumed for a new message (the
    # conversation could never return to the root); the root takes it.
    _next, second = sessions.session_message_send(session=session, user=owner, content="Anything else?")
    assert second.agent_id == root.pk


def test_transfers_outside_the_relations_or_the_team_are_refused(workspace, other_workspace, owner, outsider,
                                                                 session, team):
    _root, billing, _security = team
    stranger = make_agent(workspace=workspace, owner=owner, name="Stranger")  # same workspace, not in the team
    foreign = make_agent(workspace=other_workspace, owner=outsider, name="Foreign")
    agent_team_update(agent=billing, actor=owner, disallow_transfer_to_peers=True)
    _message, first = sessions.session_message_send(session=session, user=owner, content="Help")
    run(first, transfer("Billing"))
    handed = active_run(session)
    run(handed, transfer("Stranger", call_id="a"), transfer(str(foreign.pk), call_id="b"),
        transfer("Security", call_id="c"), transfer("Billing", call_id="d"), text_reply("I will handle it."))
    observed = {step.call_id: step for step in handed.steps.filter(step_type="observation")}
    assert observed["a"].output["error"]["code"] == "NOT_FOUND" and "Stranger" in observed["a"].error
    assert observed["b"].output["error"]["code"] == "NOT_FOUND"
    assert "disallow_transfer_to_peers" in observed["c"].error
    assert "already the active agent" in observed["d"].error
    assert all(step.status == "failed" for step in observed.values())
    assert handed.result["summary"] == "I will handle it."
    assert not Execution.objects.filter(agent__in=[stranger, foreign]).exists()


def test_a_hand_off_that_would_raise_authority_is_refused(workspace, owner, durable_tool_records):
    """A read-only root may hand over to a read-only sibling of the writer but not to the
    automated writer: that transfer is refused, nothing is handed over, nothing is written."""
    calls, _hooks = durable_tool_records
    root = make_agent(workspace=workspace, owner=owner, name="Reader", action_level="read_only")
    writer = make_agent(workspace=workspace, owner=owner, name="Writer", action_level="automated",
                        tools=[WRITE.name])
    helper = make_agent(workspace=workspace, owner=owner, name="Helper", action_level="read_only")
    for child in (writer, helper):
        agent_team_update(agent=child, actor=owner, parent_agent_id=root.pk)
    session = sessions.session_create(workspace=workspace, agent=root, user=owner)
    _message, first = sessions.session_message_send(session=session, user=owner, content="Delete the record")
    status, model = run(first, transfer("Writer", "it can write"), text_reply("I cannot delete; ask Writer directly."))
    assert status == "success"
    prompt = model.requests[0]["messages"][0]["content"]
    assert "Helper" in prompt and "Writer" not in prompt  # the team section offers only agents at or below read_only
    refused = first.steps.get(step_type="observation", tool_name="transfer_to_agent")
    assert refused.status == "failed"
    assert refused.output["error"]["details"]["code"] == "transfer_raises_authority"
    assert refused.error.startswith("refused: Writer acts at automated, above this message's read_only")
    assert first.result["summary"] == "I cannot delete; ask Writer directly."  # the reader kept the message
    session.refresh_from_db()
    assert session.active_execution_id is None
    assert not Execution.objects.filter(agent=writer).exists()
    assert not AuditLogEntry.objects.filter(event_type="agent_transferred").exists()
    assert calls == []


def test_a_hand_off_to_an_equal_or_lower_level_runs_at_the_receivers_own_level(workspace, owner):
    root = make_agent(workspace=workspace, owner=owner, name="Lead", action_level="act_with_approval")
    peer = make_agent(workspace=workspace, owner=owner, name="Peer", action_level="act_with_approval")
    lower = make_agent(workspace=workspace, owner=owner, name="Lower", action_level="read_only")
    for child in (peer, lower):
        agent_team_update(agent=child, actor=owner, parent_agent_id=root.pk)
    session = sessions.session_create(workspace=workspace, agent=root, user=owner)
    _message, first = sessions.session_message_send(session=session, user=owner, content="Look it up")
    _status, model = run(first, transfer("Lower"))
    prompt = model.requests[0]["messages"][0]["content"]
    assert "Peer" in prompt and "Lower" in prompt
    assert first.steps.get(step_type="observation", tool_name="transfer_to_agent").output["result"][
        "action_level"] == "read_only"
    handed = active_run(session)
    assert handed.agent_id == lower.pk
    assert request_build(handed).agent_config.action_level.value == "read_only"
    # Lower may not hand back up to act_with_approval: its team section is empty, so it
    # answers itself.
    _status, model = run(handed, text_reply("Found it."))
    assert "## Your team" not in model.requests[0]["messages"][0]["content"]


def test_a_level_raised_after_the_call_stops_the_hand_off_with_a_reason(workspace, owner):
    root = make_agent(workspace=workspace, owner=owner, name="Reader", action_level="read_only")
    helper = make_agent(workspace=workspace, owner=owner, name="Helper", action_level="read_only")
    agent_team_update(agent=helper, actor=owner, parent_agent_id=root.pk)
    session = sessions.session_create(workspace=workspace, agent=root, user=owner)
    _message, first = sessions.session_message_send(session=session, user=owner, content="Help")
    services.execution_run_segment(execution_id=first.pk, llm=ScriptedLLM([transfer("Helper")]))
    raised = agent_version_create(agent=helper, actor=owner, goal="Help.", instructions="Be careful.",
                                  action_level="automated", tools=[])
    agent_version_deploy(agent=helper, version=raised, actor=owner)  # deployed between the call and its hand-off
    assert services.execution_post_process(execution_id=first.pk) is True
    session.refresh_from_db()
    assert session.active_execution_id is None
    why = SessionMessage.objects.filter(session=session, role="agent").order_by("-sequence").first()
    assert why.content.startswith("The hand-off to Helper did not happen: Helper acts at automated, above this "
                                  "message's read_only")
    assert not Execution.objects.filter(agent=helper).exists()


def test_the_hand_off_depth_limit_per_message(session, owner, team, settings):
    settings.RIVER_MAX_HANDOFFS_PER_MESSAGE = 1
    _message, first = sessions.session_message_send(session=session, user=owner, content="Help")
    run(first, transfer("Billing"))
    handed = active_run(session)
    run(handed, transfer("Triage"), text_reply("Fine, me then."))
    refused = handed.steps.get(step_type="observation", tool_name="transfer_to_agent")
    assert refused.output["error"]["details"]["code"] == "handoff_depth_exceeded"
    session.refresh_from_db()
    assert session.active_execution_id is None


def test_a_team_change_after_the_call_stops_the_hand_off_with_a_reason(session, owner, team):
    _root, billing, _security = team
    _message, first = sessions.session_message_send(session=session, user=owner, content="Help")
    services.execution_run_segment(execution_id=first.pk, llm=ScriptedLLM([transfer("Billing")]))
    agent_team_update(agent=billing, actor=owner, parent_agent_id=None)  # removed from the team meanwhile
    assert services.execution_post_process(execution_id=first.pk) is True
    session.refresh_from_db()
    assert session.active_execution_id is None
    why = SessionMessage.objects.filter(session=session, role="agent").order_by("-sequence").first()
    assert why.content.startswith("The hand-off to Billing did not happen:")
    assert not AuditLogEntry.objects.filter(event_type="agent_transferred").exists()


def test_outside_a_session_transfer_is_refused(workspace, owner, team):
    root = team[0]
    execution = services.execution_start(agent=root, request=services.person_run_request(
        agent=root, user=owner, prompt="Hi"))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([
        transfer("Billing"), text_reply("Done.")]))
    execution.refresh_from_db()
    # Not a session run: the tool is not offered, and a call to it is refused.
    step = execution.steps.get(step_type="observation", tool_name="transfer_to_agent")
    assert step.status == "failed" and step.output["error"]["code"] == "INVALID_TOOL"

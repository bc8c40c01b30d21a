"""One event, one JSON: what the WebSocket sends live, what it replays after a reconnect
and what ``GET /api/v1/executions/{id}/events/`` returns are the same object for every
event of a real run (``rivercore.events.event_message``).

The run asks the user a question, is answered, proposes a governed write, is approved
and finishes, so it emits every event type River has."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator

from executions import services, tasks
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from riverapp.asgi import application
from rivercore.events import RunEventType
from telemetry import events as telemetry_events
from tenancy.models import Membership
from tenancy.permissions import Role
from tenancy.services import token_issue
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """The durable test tools' records start and end empty."""


@pytest.fixture
def live(monkeypatch):
    """Every event handed to the channel layer, in the order it was handed over."""
    sent: list[dict] = []
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)
    # Every committed batch through the publisher, where it is recorded (no direct send).
    monkeypatch.setattr(telemetry_events, "_direct_paused_until", float("inf"))
    monkeypatch.setattr(telemetry_events._publisher, "submit",
                        lambda groups, events, key=None: sent.extend(json.loads(json.dumps(events))))
    return sent


def _replayed(execution_id: int, token: str, count: int) -> list[dict]:
    async def scenario():
        socket = WebsocketCommunicator(application, f"/ws/executions/{execution_id}/?after=0",
                                       subprotocols=["bearer", token])
        assert (await socket.connect(timeout=5))[0]
        received = [json.loads(await socket.receive_from(timeout=5)) for _ in range(count)]
        assert await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()
        return received

    channel_layers.backends.clear()
    try:
        return async_to_sync(scenario)()
    finally:
        channel_layers.backends.clear()


def test_live_replayed_and_rest_events_are_the_same_json_for_every_event_type(workspace, owner, live,
                                                                              api_client_for, django_user_model):
    approver = django_user_model.objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=approver, role=Role.ADMIN)
    agent = make_agent(workspace=workspace, owner=owner, tools=["ask_user", "durable_write"],
                       action_level="act_with_approval", require_approval_for=["durable_write"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="ask, then write"))
    question = {"interaction_type": "clarification_request", "message": "Which marker?", "options": ["w1", "w2"]}
    llm = ScriptedLLM([tool_reply("ask_user", question, "q1"),
                       tool_reply("durable_write", {"marker": "w2"}, call_id="call_w2"), text_reply("wrote w2")])

    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_interaction"
    services.execution_respond(execution=execution, user=owner, user_response="w2")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    approval_resolve(user=approver, approval_id=approval.pk, status="approved")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    rest = api_client_for(owner).get(f"/api/v1/executions/{execution.pk}/events/").json()
    # Every type but the two that open a session's runs (the next test covers those).
    session_only = {RunEventType.USER_MESSAGE.value, RunEventType.AGENT_TRANSFERRED.value}
    assert {event["type"] for event in rest} == {kind.value for kind in RunEventType} - session_only
    assert [event["seq"] for event in rest] == list(range(1, len(rest) + 1))

    # The workspace's feed also carries messages that belong to no run (a person's
    # notifications changed): only this run's numbered events are compared.
    live_by_seq = {event["seq"]: event for event in live
                   if event.get("execution_id") == execution.pk and "seq" in event}
    assert sorted(live_by_seq) == [event["seq"] for event in rest]
    for event in rest:
        assert live_by_seq[event["seq"]] == event, event["type"]

    replayed = _replayed(execution.pk, token_issue(user=owner).plaintext, len(rest))
    assert replayed == rest


def test_a_sessions_events_are_the_same_json_live_replayed_and_listed(workspace, owner, live, api_client_for):
    """The two event types only a session's runs emit: ``user_message`` opens the run that
    answers a message, ``agent_transferred`` the run of the agent a message was handed to."""
    from agents.services import agent_team_update
    from executions.services import sessions

    root = make_agent(workspace=workspace, owner=owner, name="Triage")
    billing = make_agent(workspace=workspace, owner=owner, name="Billing")
    agent_team_update(agent=billing, actor=owner, parent_agent_id=root.pk)
    session = sessions.session_create(workspace=workspace, agent=root, user=owner)
    _message, first = sessions.session_message_send(session=session, user=owner, content="I was charged twice")
    services.execution_run_segment(execution_id=first.pk, llm=ScriptedLLM([
        tool_reply("transfer_to_agent", {"agent": "Billing", "reason": "a duplicate charge"}, "t1")]))
    assert services.execution_post_process(execution_id=first.pk) is True
    session.refresh_from_db()
    handed = session.active_execution
    services.execution_run_segment(execution_id=handed.pk, llm=ScriptedLLM([text_reply("Refunded.")]))

    token = token_issue(user=owner).plaintext
    seen = set()
    for execution in (first, handed):
        rest = api_client_for(owner).get(f"/api/v1/executions/{execution.pk}/events/").json()
        seen |= {event["type"] for event in rest}
        live_by_seq = {event["seq"]: event for event in live if event.get("execution_id") == execution.pk
                       and "seq" in event}
        for event in rest:
            assert live_by_seq[event["seq"]] == event, event["type"]
        assert _replayed(execution.pk, token, len(rest)) == rest
    assert {"user_message", "agent_transferred"} <= seen

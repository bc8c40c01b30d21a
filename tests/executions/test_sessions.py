"""Sessions (docs/sessions.md): messages answered by durable runs one at a time, a message
sent while a run is active queued and started by that run's end (whatever the end),
the history and its stored summary, the event stream and the API's refusals.

Real segments with a scripted model; run-end handlers run in post-processing, called
here as the worker would. Tool handlers run in the engine's threads: these tests commit."""

from __future__ import annotations

import pytest

from artifacts.models import Artifact
from executions import services
from executions.models import Execution, ExecutionEvent, Session, SessionMessage
from executions.services import sessions
from executions.services.load import request_build
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from tests.executions.durable_support import WRITE
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)

Status = Execution.Status
State = SessionMessage.State


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Helper")


@pytest.fixture
def session(workspace, agent, owner):
    return sessions.session_create(workspace=workspace, agent=agent, user=owner)


def send(session, user, content: str) -> tuple[SessionMessage, Execution | None]:
    return sessions.session_message_send(session=session, user=user, content=content)


def answer(execution: Execution, *replies) -> Execution:
    """Run the execution's segment with the scripted replies, then its post-processing."""
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(list(replies)))
    assert services.execution_post_process(execution_id=execution.pk) is True
    execution.refresh_from_db()
    return execution


def message_run(message: SessionMessage) -> Execution:
    message.refresh_from_db()
    assert message.execution_id is not None, message.state
    return Execution.objects.get(pk=message.execution_id)


# --- the queue ------------------------------------------------------------------------------


def test_a_message_sent_while_a_run_is_active_is_queued_and_started_when_it_ends(session, owner):
    first, run = send(session, owner, "What changed this week?")
    assert run is not None and run.session_id == session.pk and run.status == Status.QUEUED
    assert first.state == State.STARTED and run.input_prompt == "What changed this week?"

    second, queued = send(session, owner, "And the week before?")
    third, also_queued = send(session, owner, "Thanks, one more thing.")
    assert queued is None and also_queued is None
    assert second.state == State.QUEUED and third.state == State.QUEUED
    session.refresh_from_db()
    assert session.active_execution_id == run.pk

    answer(run, text_reply("Two releases shipped."))
    second_run = message_run(second)  # started by the first run's end, in order
    third.refresh_from_db()
    assert third.state == State.QUEUED and third.execution_id is None
    first.refresh_from_db()
    assert first.state == State.ANSWERED
    reply = SessionMessage.objects.get(session=session, reply_to=first)
    assert reply.role == "agent" and reply.content == "Two releases shipped." and reply.execution_id == run.pk

    answer(second_run, text_reply("One release."))
    third_run = message_run(third)
    answer(third_run, text_reply("Sure."))
    session.refresh_from_db()
    assert session.active_execution_id is None
    assert list(session.messages.order_by("sequence").values_list("role", "state")) == [
        ("user", "answered"), ("user", "answered"), ("user", "answered"),
        ("agent", "answered"), ("agent", "answered"), ("agent", "answered"),
    ]
    # Once idle, the next message starts at once.
    _fourth, started = send(session, owner, "Bye")
    assert started is not None


def test_post_processing_twice_starts_the_next_message_once(session, owner):
    _first, run = send(session, owner, "One")
    second, _ = send(session, owner, "Two")
    services.execution_run_segment(execution_id=run.pk, llm=ScriptedLLM([text_reply("Done.")]))
    assert services.execution_post_process(execution_id=run.pk) is True
    assert services.execution_post_process(execution_id=run.pk) is False
    # The handler itself called again (a redelivered run end) finds the session moved on.
    from executions.runend import RunEnded
    from rivercore.types.runs import RunStatus

    sessions.session_run_ended(RunEnded(execution_id=run.pk, workspace_id=run.workspace_id, agent_id=run.agent_id,
                                        status=RunStatus.COMPLETED, summary="", trigger_type="manual",
                                        trigger_id=None, parent_execution_id=None, requested_by_id=owner.pk,
                                        session_id=session.pk))
    assert Execution.objects.filter(session=session).count() == 2
    assert SessionMessage.objects.filter(session=session, role="agent").count() == 1
    assert message_run(second).status == Status.QUEUED


def test_a_session_whose_run_end_was_missed_does_not_stall(session, owner, monkeypatch):
    _first, run = send(session, owner, "One")
    second, _ = send(session, owner, "Two")
    services.execution_run_segment(execution_id=run.pk, llm=ScriptedLLM([text_reply("Done.")]))

    def broken(ended):
        raise RuntimeError("handler crashed")

    from executions import runend

    registered = runend._handlers["sessions"]
    monkeypatch.setitem(runend._handlers, "sessions", runend._Registered(broken, registered.applies, False))
    assert services.execution_post_process(execution_id=run.pk) is True  # the run's end is not blocked
    second.refresh_from_db()
    assert second.state == State.QUEUED

    monkeypatch.setitem(runend._handlers, "sessions", registered)
    third, started = send(session, owner, "Three")
    assert started is None  # the older queued message goes first
    assert message_run(second).status == Status.QUEUED
    third.refresh_from_db()
    assert third.state == State.QUEUED


def test_an_approval_inside_a_session_pauses_the_queue_until_the_run_ends(workspace, owner, editor):
    writer = make_agent(workspace=workspace, owner=owner, name="Writer", tools=[WRITE.name],
                        action_level="act_with_approval", require_approval_for=[WRITE.name])
    session = sessions.session_create(workspace=workspace, agent=writer, user=owner)
    _first, run = send(session, owner, "Record the refund")
    status = services.execution_run_segment(execution_id=run.pk, llm=ScriptedLLM([
        tool_reply(WRITE.name, {"marker": "refund-1"}, "w1")]))
    assert status == Status.AWAITING_APPROVAL
    second, queued = send(session, owner, "And tell me when it is done")
    assert queued is None

    approval = ApprovalRequest.objects.get(execution_id=run.pk)
    approval_resolve(user=editor, approval_id=approval.pk, status="approved")
    second.refresh_from_db()
    assert second.state == State.QUEUED  # the run resumed, it has not ended
    answer(run, text_reply("Refund recorded."))
    assert run.status == Status.COMPLETED
    assert message_run(second).status == Status.QUEUED


def test_cancelling_the_active_run_starts_the_next_message(session, owner):
    _first, run = send(session, owner, "A long job")
    second, _ = send(session, owner, "Never mind, something else")
    services.execution_cancel(execution=run, user=owner)
    assert services.execution_post_process(execution_id=run.pk) is True
    run.refresh_from_db()
    assert run.status == Status.CANCELLED
    assert message_run(second).status == Status.QUEUED
    reply = SessionMessage.objects.get(reply_to__execution=run)
    assert reply.references["status"] == "cancelled" and "Cancelled" in reply.content
    assert reply.references["outcome"] == "cancelled"


def test_a_queued_message_whose_agent_was_paused_fails_with_a_reason_and_the_queue_goes_on(session, agent, owner):
    _first, run = send(session, owner, "One")
    second, _ = send(session, owner, "Two")
    agent.status = agent.Status.PAUSED
    agent.save(update_fields=["status"])
    answer(run, text_reply("Done."))
    second.refresh_from_db()
    assert second.state == State.FAILED
    why = SessionMessage.objects.get(reply_to=second)
    assert "could not be answered" in why.content and "paused" in why.content
    session.refresh_from_db()
    assert session.active_execution_id is None


# --- history --------------------------------------------------------------------------------


def test_a_run_sees_the_earlier_turns_and_older_ones_are_summarised_and_stored(session, owner, settings):
    settings.RIVER_SESSION_HISTORY_TOKENS = 100  # about two short turns
    for number in range(1, 5):
        _message, run = send(session, owner, f"Question number {number} about the weekly report figures?")
        answer(run, text_reply(f"Answer number {number}: the figure is {number * 10}."))

    _message, run = send(session, owner, "And the fifth?")
    request = request_build(run)
    assert request.session is not None
    turns = [turn.question for turn in request.session.turns]
    assert turns and turns[-1].startswith("Question number 4")
    assert len(turns) < 4
    session.refresh_from_db()
    assert session.summary.startswith("Q: Question number 1") and "A: Answer number 1" in session.summary
    assert request.session.summary == session.summary
    folded = session.summary_through
    assert folded > 0
    prompt = request_build(run).model_dump()["session"]
    assert prompt["summary"] == session.summary

    model = ScriptedLLM([text_reply("Fifty.")])
    services.execution_run_segment(execution_id=run.pk, llm=model)
    system = model.requests[0]["messages"][0]["content"]
    assert "## Conversation so far" in system and "Question number 4" in system and "Answer number 1" in system


def test_the_summary_stays_within_its_limit(session, owner, settings):
    settings.RIVER_SESSION_HISTORY_TOKENS = 100
    settings.RIVER_SESSION_SUMMARY_CHARS = 1000
    for number in range(1, 9):
        _message, run = send(session, owner, f"Question {number}: " + "details " * 20)
        answer(run, text_reply(f"Answer {number}: " + "words " * 30))
    session.refresh_from_db()
    assert len(session.summary) <= 1000
    assert session.summary.startswith("(older turns omitted)\n")
    assert "Q: Question 1:" not in session.summary
    assert "Q: Question 6:" in session.summary or "Q: Question 5:" in session.summary


# --- the event stream -----------------------------------------------------------------------


def test_the_event_stream_holds_messages_and_runs_in_order(session, owner, api_client_for):
    _first, run = send(session, owner, "Hello")
    send(session, owner, "Second")
    answer(run, text_reply("Hi."))
    client = api_client_for(owner)
    events = client.get(f"/api/v1/sessions/{session.pk}/events").json()
    kinds = [(e["execution_id"], e["type"]) for e in events]
    second_run = Execution.objects.filter(session=session).exclude(pk=run.pk).get()
    assert kinds[:2] == [(run.pk, "user_message"), (run.pk, "run_started")]
    assert (run.pk, "run_completed") in kinds
    assert kinds[-1] == (second_run.pk, "user_message")
    assert events[0]["content"] == "Hello" and events[0]["seq"] == 1
    seqs = [e["session_seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    later = client.get(f"/api/v1/sessions/{session.pk}/events", {"after": seqs[-2]}).json()
    assert [e["session_seq"] for e in later] == [seqs[-1]]
    # One shape: each item is the run's own event (REST and WebSocket) plus session_seq.
    run_events = client.get(f"/api/v1/executions/{run.pk}/events/").json()
    run_events = run_events.get("results", run_events) if isinstance(run_events, dict) else run_events
    own = [{k: v for k, v in e.items() if k != "session_seq"} for e in events if e["execution_id"] == run.pk]
    assert own == run_events
    # The run's own log has the message as its first event too.
    assert ExecutionEvent.objects.get(execution=run, seq=1).event_type == "user_message"


# --- the API --------------------------------------------------------------------------------


def test_the_api_opens_lists_renames_archives_and_takes_messages(workspace, agent, owner, api_client_for):
    client = api_client_for(owner)
    created = client.post("/api/v1/sessions/", {"workspace": workspace.pk, "agent": str(agent.pk)})
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["agent"] == str(agent.pk) and body["archived"] is False and body["active_execution"] is None
    url = f"/api/v1/sessions/{body['id']}/"

    files = [Artifact.objects.create(workspace=workspace, name=f"f{n}.txt", kind="text", content_type="text/plain",
                                     size=1, sha256="0" * 64, version=1, storage_name=f"x/{n}.txt").pk
             for n in range(2)]
    sent = client.post(f"{url}messages", {"content": "How many tickets?", "attachments": files})
    assert sent.status_code == 202, sent.content
    accepted = sent.json()
    assert accepted["queued"] is False and accepted["execution_id"]
    again = client.post(f"{url}messages", {"content": "And yesterday?"}).json()
    assert again == {"message_id": again["message_id"], "execution_id": None, "queued": True}
    listed = client.get(f"{url}messages").json()["results"]
    assert [(m["role"], m["queued"]) for m in listed] == [("user", False), ("user", True)]
    assert listed[0]["attachments"] == files and listed[0]["execution"] == accepted["execution_id"]
    detail = client.get(url).json()
    assert detail["queued_messages"] == 1 and detail["active_execution"] == accepted["execution_id"]
    assert detail["title"] == "How many tickets?"  # from the first message

    assert client.patch(url, {"title": "Tickets"}).json()["title"] == "Tickets"
    assert client.patch(url, {"archived": True}).json()["archived"] is True
    refused = client.post(f"{url}messages", {"content": "Still there?"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "session_archived"
    assert client.get("/api/v1/sessions/").json()["results"] == []
    assert [s["id"] for s in client.get("/api/v1/sessions/", {"archived": "true"}).json()["results"]] == [body["id"]]
    assert client.patch(url, {"archived": False}).json()["archived"] is False
    assert client.post(f"{url}messages", {"content": "Back again"}).status_code == 202
    assert [s["id"] for s in client.get("/api/v1/sessions/", {"agent": str(agent.pk),
                                                              "workspace": workspace.pk}).json()["results"]] \
        == [body["id"]]


@pytest.mark.parametrize(("payload", "field"), [
    ({"content": ""}, "content"),
    ({"content": "   "}, "content"),
    ({"content": "x" * 20_001}, "content"),
    ({"content": "hi", "attachments": ["a"]}, "attachments"),
    ({"content": "hi", "attachments": [0]}, "attachments"),
    ({"content": "hi", "attachments": list(range(1, 30))}, "attachments"),
    ({"content": "hi", "role": "agent"}, "role"),
])
def test_a_bad_message_is_a_400_naming_the_field_and_nothing_is_written(session, owner, api_client_for, payload,
                                                                         field):
    response = api_client_for(owner).post(f"/api/v1/sessions/{session.pk}/messages", payload)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not SessionMessage.objects.filter(session=session).exists()
    assert not Execution.objects.filter(session=session).exists()


def test_opening_a_session_refuses_bad_input_naming_the_field(workspace, other_workspace, owner, outsider,
                                                               api_client_for):
    client = api_client_for(owner)
    foreign = make_agent(workspace=other_workspace, owner=outsider, name="Theirs")
    paused = make_agent(workspace=workspace, owner=owner, name="Paused", status="paused")
    for payload, field in [({"workspace": workspace.pk, "agent": str(foreign.pk)}, "agent"),
                           ({"workspace": workspace.pk, "agent": str(paused.pk)}, "agent"),
                           ({"workspace": workspace.pk, "agent": "nope"}, "agent"),
                           ({"workspace": workspace.pk}, "agent"),
                           ({"workspace": workspace.pk, "agent": str(paused.pk), "owner": 1}, "owner")]:
        response = client.post("/api/v1/sessions/", payload)
        assert response.status_code == 400, (payload, response.content)
        assert field in response.json()["error"]["details"]
    assert not Session.objects.exists()
    assert client.get("/api/v1/sessions/", {"archived": "maybe"}).status_code == 400
    assert client.get("/api/v1/sessions/1/events", {"after": "x"}).status_code in (400, 404)


def test_outsiders_and_other_members_get_404_everywhere(session, workspace, agent, owner, member, outsider,
                                                         api_client_for):
    send(session, owner, "Private question")
    url = f"/api/v1/sessions/{session.pk}/"
    for user in (outsider, member):
        client = api_client_for(user)
        assert client.get(url).status_code == 404
        assert client.patch(url, {"title": "mine"}).status_code == 404
        assert client.get(f"{url}messages").status_code == 404
        assert client.post(f"{url}messages", {"content": "hi"}).status_code == 404
        assert client.get(f"{url}events").status_code == 404
        assert client.get("/api/v1/sessions/").json()["results"] == []
    # Nor can an outsider open a session in our workspace.
    response = api_client_for(outsider).post("/api/v1/sessions/", {"workspace": workspace.pk, "agent": str(agent.pk)})
    assert response.status_code == 404
    session.refresh_from_db()
    assert session.title == "Private question"
    assert SessionMessage.objects.filter(session=session).count() == 1


def test_sending_needs_the_execute_permission(workspace, agent, api_client_for):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    viewer = get_user_model().objects.create_user(username="viewer", password="pw-viewer")
    Membership.objects.create(workspace=workspace, user=viewer, role=Role.VIEWER)
    response = api_client_for(viewer).post("/api/v1/sessions/", {"workspace": workspace.pk, "agent": str(agent.pk)})
    assert response.status_code == 403
    assert not Session.objects.exists()

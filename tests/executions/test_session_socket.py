"""The session's WebSocket, ``/ws/sessions/<id>/?after=<session_seq>`` (docs/sessions.md),
through the real ASGI app and the Redis channel layer: the stored events after the cursor
in the REST stream's shape, then the live events of every run of the session with their
``session_seq``, the streamed pieces of the answer before the complete events, and
``message_queued`` notices. A session is its creator's: anyone else is refused.

The model is the local fake OpenAI server streaming through litellm's real HTTP path;
``hold_after`` stops its stream half-way until the test has seen pieces arrive."""

from __future__ import annotations

import json
import threading

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings

from executions import services
from executions.models import Execution
from executions.services import sessions
from riverapp.asgi import application
from telemetry.events import events_flush
from tenancy.services import token_issue
from tests.executions.test_consumers import _session_headers, fresh_channel_layer  # noqa: F401 - autouse
from tests.executions.test_partial_events import _router, _start_segment, quiet_queue  # noqa: F401 - autouse
from tests.factories import make_agent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="live delivery is tested over the Redis channel layer"),
]

TIMEOUT = 10
ANSWER = "Twelve invoices are overdue, three of them by more than a month."


@pytest.fixture
def session(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, name="Helper", tools=[])
    return sessions.session_create(workspace=workspace, agent=agent, user=owner)


def _socket(session_id: int, user, after: int | None = None) -> WebsocketCommunicator:
    """``user``: a user (a token is issued) or a token already issued (inside async code)."""
    token = user if isinstance(user, str) else token_issue(user=user).plaintext
    path = f"/ws/sessions/{session_id}/" + (f"?after={after}" if after is not None else "")
    return WebsocketCommunicator(application, path, subprotocols=["bearer", token])


async def _until(socket, predicate, seen: list[dict]) -> dict:
    while True:
        event = json.loads(await socket.receive_from(timeout=TIMEOUT))
        seen.append(event)
        if predicate(event):
            return event


def _rest(client, session_id: int, after: int = 0) -> list[dict]:
    response = client.get(f"/api/v1/sessions/{session_id}/events", {"after": after})
    assert response.status_code == 200
    return response.json()


def test_live_events_pieces_and_queued_notices_then_the_same_events_as_rest(session, owner, fake_openai,
                                                                             api_client_for):
    resume = threading.Event()
    token = token_issue(user=owner).plaintext
    server = fake_openai()
    server.text(ANSWER, hold_after=4, resume=resume)

    async def scenario():
        socket = _socket(session.pk, token)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        seen: list[dict] = []
        _message, run = await database_sync_to_async(sessions.session_message_send)(
            session=session, user=owner, content="How many invoices are overdue?")
        await _until(socket, lambda e: e["type"] == "user_message", seen)
        queued, none = await database_sync_to_async(sessions.session_message_send)(
            session=session, user=owner, content="And last month?")
        assert none is None
        notice = await _until(socket, lambda e: e["type"] == "message_queued", seen)
        thread, result = _start_segment(run.pk, _router(server))
        await _until(socket, lambda e: e["type"] == "answer_delta", seen)
        resume.set()
        await _until(socket, lambda e: e["type"] == "run_completed", seen)
        await database_sync_to_async(thread.join)(TIMEOUT)
        await socket.disconnect()
        return run, queued, notice, seen, result

    run, queued, notice, seen, result = async_to_sync(scenario)()

    assert result["status"] == "success"
    assert notice == {"type": "message_queued", "session_id": session.pk, "message_id": queued.pk,
                      "sequence": queued.sequence, "content": "And last month?", "attachments": []}
    types = [e["type"] for e in seen]
    pieces = [e for e in seen if e["type"] == "answer_delta"]
    assert "".join(p["text"] for p in pieces) == ANSWER and all("session_seq" not in p for p in pieces)
    last_piece = max(i for i, kind in enumerate(types) if kind == "answer_delta")
    assert last_piece < types.index("run_completed")
    # Every stored event that came live carries session_seq, and equals the REST item.
    live = [e for e in seen if "session_seq" in e]
    rest = _rest(api_client_for(owner), session.pk)
    assert live == [e for e in rest if e["execution_id"] == run.pk]
    assert [e["type"] for e in live][:2] == ["user_message", "run_started"]
    assert all(e["execution_id"] == run.pk for e in live)


def test_reconnecting_after_a_cursor_replays_the_rest_then_goes_live(session, owner, api_client_for):
    _message, run = sessions.session_message_send(session=session, user=owner, content="Hello")
    from tests.factories import ScriptedLLM, text_reply

    services.execution_run_segment(execution_id=run.pk, llm=ScriptedLLM([text_reply("Hi there.")]))
    assert services.execution_post_process(execution_id=run.pk) is True
    assert events_flush()
    stored = _rest(api_client_for(owner), session.pk)
    cursor = stored[1]["session_seq"]
    token = token_issue(user=owner).plaintext

    async def scenario():
        socket = _socket(session.pk, token, after=cursor)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        replayed = [json.loads(await socket.receive_from(timeout=TIMEOUT)) for _ in stored[2:]]
        _m, second = await database_sync_to_async(sessions.session_message_send)(
            session=session, user=owner, content="Again")
        live: list[dict] = []
        first = await _until(socket, lambda e: "session_seq" in e, live)
        await socket.disconnect()
        return replayed, first, second

    replayed, first, second = async_to_sync(scenario)()
    assert replayed == stored[2:]
    assert first["type"] == "user_message" and first["execution_id"] == second.pk
    assert first["session_seq"] > stored[-1]["session_seq"]


def _accepted(communicator: WebsocketCommunicator) -> bool:
    async def go():
        connected, _ = await communicator.connect(timeout=TIMEOUT)
        if connected:
            await communicator.disconnect()
        return connected

    return async_to_sync(go)()


def test_only_the_creator_may_listen(session, owner, member, outsider):
    assert _accepted(_socket(session.pk, owner))
    assert not _accepted(_socket(session.pk, member))  # same workspace, not theirs
    assert not _accepted(_socket(session.pk, outsider))
    assert not _accepted(_socket(session.pk + 1000, owner))  # missing reads like someone else's


def test_browser_sockets_need_the_session_cookie_and_the_same_origin(session, owner):
    path = f"/ws/sessions/{session.pk}/"
    assert _accepted(WebsocketCommunicator(application, path, headers=_session_headers(owner, b"http://localhost")))
    assert not _accepted(WebsocketCommunicator(application, path,
                                               headers=_session_headers(owner, b"http://evil.example")))
    assert not _accepted(WebsocketCommunicator(application, path, headers=[(b"origin", b"http://localhost")]))


def test_a_run_outside_the_session_never_reaches_it(session, owner, workspace):
    agent = make_agent(workspace=workspace, owner=owner, name="Other", tools=[])
    other = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Unrelated"))
    assert other.session_id is None
    from tests.factories import ScriptedLLM, text_reply

    token = token_issue(user=owner).plaintext

    async def scenario():
        socket = _socket(session.pk, token)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        await database_sync_to_async(services.execution_run_segment)(
            execution_id=other.pk, llm=ScriptedLLM([text_reply("Done.")]))
        await database_sync_to_async(events_flush)()
        nothing = await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()
        return nothing

    assert async_to_sync(scenario)() is True
    assert Execution.objects.get(pk=other.pk).status == Execution.Status.COMPLETED

"""Partial events of a durable run, through the real ASGI app and channel layer (Redis
when REDIS_URL is set): the model's reply streams to a watching WebSocket client while
it is generated, before the complete events, and never lands in the run's event log.

The model is the local fake OpenAI server streaming server-sent events through
litellm's real HTTP path; ``hold_after`` stops its stream half-way until the test has
seen the first pieces arrive, which proves they are live and not replayed later."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connection

from executions import tasks
from executions.models import Execution, ExecutionEvent
from executions.routing import router_build
from executions.services import execution_run_segment, execution_start, person_run_request
from riverapp.asgi import application
from rivercore.events import PartialEventType
from rivercore.router import ProviderConfig
from rivercore.types.agents import Tier
from telemetry import events
from telemetry.events import RunPartials
from telemetry.layers import RiverChannelLayer
from tenancy.services import token_issue
from tests.executions.test_consumers import fresh_channel_layer  # noqa: F401 - the autouse fixture
from tests.factories import make_agent

pytestmark = pytest.mark.django_db(transaction=True)
# The in-memory layer's queues cannot be woken from the publisher's thread outside
# `runriver` (which binds them to the server's loop): live delivery is tested on Redis.
live_layer = pytest.mark.skipif(not settings.REDIS_URL, reason="live delivery is tested over the Redis channel layer")

TIMEOUT = 10
ANSWER = "Forty-two tickets are open, and nine of them are high priority."
DELTAS = {PartialEventType.ANSWER_DELTA.value, PartialEventType.REASONING_DELTA.value}


@pytest.fixture(autouse=True)
def quiet_queue(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


@pytest.fixture
def token(owner):
    return token_issue(user=owner).plaintext


@pytest.fixture
def execution(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    return execution_start(agent=agent, request=person_run_request(
        agent=agent, user=owner, prompt="How many tickets are open?"))


def _router(server):
    return router_build([ProviderConfig(name=f"p-{uuid.uuid4().hex[:8]}",
                                        models={Tier.BALANCED: "openai/river-test-model"},
                                        base_url=server.base_url, api_key="sk-test", max_retries=2)],
                        sleep=lambda _s: None)


def _socket(execution_id: int, token: str, after: int | None = None) -> WebsocketCommunicator:
    path = f"/ws/executions/{execution_id}/" + (f"?after={after}" if after is not None else "")
    return WebsocketCommunicator(application, path, subprotocols=["bearer", token])


def _segment(execution_id: int, llm) -> str | None:
    try:
        return execution_run_segment(execution_id=execution_id, llm=llm)
    finally:
        connection.close()


def _start_segment(execution_id: int, llm) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(status=_segment(execution_id, llm)))
    thread.start()
    return thread, result


async def _until(socket, predicate, seen: list[dict]) -> dict:
    while True:
        event = json.loads(await socket.receive_from(timeout=TIMEOUT))
        seen.append(event)
        if predicate(event):
            return event


def _stored_types(execution_id: int) -> list[str]:
    return list(ExecutionEvent.objects.filter(execution_id=execution_id).order_by("seq")
                .values_list("event_type", flat=True))


@live_layer
def test_pieces_arrive_live_before_the_complete_events_and_are_never_stored(execution, token, fake_openai,
                                                                           api_client_for, owner):
    resume = threading.Event()
    server = fake_openai()
    server.text(ANSWER, hold_after=4, resume=resume)  # the role chunk and three pieces, then it waits

    async def scenario():
        socket = _socket(execution.pk, token)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        thread, result = _start_segment(execution.pk, _router(server))
        seen: list[dict] = []
        first = await _until(socket, lambda e: e["type"] == "answer_delta", seen)
        # The model is still generating (its stream is held): the piece came live.
        status_while_held = await database_sync_to_async(
            lambda: Execution.objects.values_list("status", flat=True).get(pk=execution.pk))()
        resume.set()
        await _until(socket, lambda e: e["type"] == "run_completed", seen)
        await socket.disconnect()
        await database_sync_to_async(thread.join)(TIMEOUT)
        return first, status_while_held, seen, result

    first, status_while_held, seen, result = async_to_sync(scenario)()

    assert result["status"] == "success"
    assert status_while_held == Execution.Status.RUNNING
    assert first == {"type": "answer_delta", "execution_id": execution.pk, "turn": 1, "index": 0,
                     "text": ANSWER[:6], "partial": True}
    pieces = [e for e in seen if e["type"] == "answer_delta"]
    assert [p["index"] for p in pieces] == list(range(len(pieces)))
    assert "".join(p["text"] for p in pieces) == ANSWER
    assert all("seq" not in p for p in pieces)
    # Every piece before the complete events of the turn and of the run.
    types = [e["type"] for e in seen]
    last_piece = max(i for i, kind in enumerate(types) if kind == "answer_delta")
    assert last_piece < types.index("turn_reasoning") < types.index("run_completed")
    assert seen[types.index("run_completed")]["final_output_summary"].startswith(ANSWER[:40])
    # Not in the log, nor over REST.
    stored = _stored_types(execution.pk)
    assert stored[0] == "run_started" and stored[-1] == "run_completed" and not DELTAS & set(stored)
    listed = api_client_for(owner).get(f"/api/v1/executions/{execution.pk}/events/?after=0")
    assert listed.status_code == 200
    assert [e["type"] for e in listed.json()] == stored


@live_layer
def test_a_client_that_reconnects_mid_stream_gets_the_log_then_the_live_pieces(execution, token, fake_openai):
    resume = threading.Event()
    server = fake_openai()
    server.text(ANSWER, hold_after=4, resume=resume)

    async def scenario():
        first_socket = _socket(execution.pk, token)
        assert (await first_socket.connect(timeout=TIMEOUT))[0]
        thread, result = _start_segment(execution.pk, _router(server))
        before: list[dict] = []
        await _until(first_socket, lambda e: e["type"] == "answer_delta", before)
        await first_socket.disconnect()
        last_seq = max((e["seq"] for e in before if "seq" in e), default=0)
        again = _socket(execution.pk, token, after=last_seq)
        assert (await again.connect(timeout=TIMEOUT))[0]
        resume.set()
        after: list[dict] = []
        await _until(again, lambda e: e["type"] == "run_completed", after)
        await again.disconnect()
        await database_sync_to_async(thread.join)(TIMEOUT)
        return before, after, result

    before, after, result = async_to_sync(scenario)()

    assert result["status"] == "success"
    pieces_before = [e for e in before if e["type"] == "answer_delta"]
    pieces_after = [e for e in after if e["type"] == "answer_delta"]
    assert pieces_after, "the live stream continues on the new connection"
    # The pieces the client missed while away are not replayed; the complete event has them.
    assert pieces_after[0]["index"] > pieces_before[-1]["index"]
    stored = [e for e in after if "seq" in e]
    assert [e["seq"] for e in stored] == sorted({e["seq"] for e in stored})  # each stored event once, in order
    assert stored[-1]["type"] == "run_completed"


@live_layer
def test_a_stream_cut_mid_way_starts_the_pieces_over_and_the_stored_answer_is_whole(execution, token, fake_openai):
    server = fake_openai()
    server.text("This attempt breaks off before it", cut_after=4).text(ANSWER)

    async def scenario():
        socket = _socket(execution.pk, token)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        thread, result = _start_segment(execution.pk, _router(server))
        seen: list[dict] = []
        await _until(socket, lambda e: e["type"] == "run_completed", seen)
        await socket.disconnect()
        await database_sync_to_async(thread.join)(TIMEOUT)
        return seen, result

    seen, result = async_to_sync(scenario)()

    assert result["status"] == "success" and server.calls == 2
    indexes = [e["index"] for e in seen if e["type"] == "answer_delta"]
    restart = indexes.index(0, 1)  # the retried call starts its pieces at 0 again
    assert indexes[:restart] == list(range(restart)) and indexes[restart:] == list(range(len(indexes) - restart))
    pieces = [e["text"] for e in seen if e["type"] == "answer_delta"]
    assert "".join(pieces[restart:]) == ANSWER
    assert "".join(pieces[:restart]) != ANSWER
    assert Execution.objects.get(pk=execution.pk).result["summary"] == ANSWER
    assert not DELTAS & set(_stored_types(execution.pk))


def test_nobody_watching_means_no_stream_is_asked_for(execution, fake_openai):
    server = fake_openai()
    server.text(ANSWER)

    assert _segment(execution.pk, _router(server)) == "success"

    assert "stream" not in server.requests[0]
    assert Execution.objects.get(pk=execution.pk).result["summary"] == ANSWER


@live_layer
def test_sinks_answer_from_the_process_watch_table_asked_once_for_every_run(execution, token, workspace, owner,
                                                                           monkeypatch):
    """Each run's "is anyone watching?" is answered from memory; the process asks Redis
    about all its runs' groups in one round trip, at a sink's start and then every
    WATCHED_TTL_SECONDS."""
    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    other = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="Other"))
    asked: list[list[str]] = []
    real = RiverChannelLayer.groups_watched

    async def recording(self, groups):
        asked.append(list(groups))
        return await real(self, groups)

    monkeypatch.setattr(RiverChannelLayer, "groups_watched", recording)
    unwatched = RunPartials(other.pk)

    async def scenario():
        socket = _socket(execution.pk, token)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        sink = RunPartials(execution.pk)  # asks at once: the first call finds the answer
        first = await database_sync_to_async(sink.watched)()
        await socket.disconnect()
        return sink, first

    sink, first = async_to_sync(scenario)()

    assert first is True and unwatched.watched() is False
    # One question for both runs (each ask covers every live sink of the process).
    assert any({f"execution.{execution.pk}", f"execution.{other.pk}"} <= set(groups) for groups in asked)


@live_layer
def test_a_layer_that_does_not_answer_means_nobody_watches_and_no_run_waits(execution, monkeypatch):
    asking = threading.Event()
    calls = []

    async def stuck(self, groups):
        calls.append(groups)
        asking.set()
        await asyncio.Event().wait()  # never answers

    monkeypatch.setattr(RiverChannelLayer, "groups_watched", stuck)
    monkeypatch.setattr(events, "WATCHED_TIMEOUT_SECONDS", 0.05)
    sink = RunPartials(execution.pk)
    assert asking.wait(TIMEOUT)
    assert sink.watched() is False  # its first answer: nobody, once the layer's time is up
    assert sink.watched() is False  # then from memory: the layer is asked again only after the retry pause
    assert len(calls) == 1

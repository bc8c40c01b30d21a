"""WebSocket access and delivery, through the real ASGI app and channel layer.

The channel layer is whatever the settings configure: Redis when REDIS_URL is set
(CI), the in-memory layer otherwise. Tests use committed data (transaction=True)
because consumers read the database from their own threads.
"""

from __future__ import annotations

import json

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from channels_redis.core import RedisChannelLayer
from django.conf import settings
from django.db import transaction
from django.test import Client

from agents.models import Agent, AgentVersion
from executions.models import Execution, ExecutionEvent
from riverapp.asgi import application
from telemetry.events import event_publish, events_flush
from tenancy.services import token_issue

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 5


@pytest.fixture(autouse=True)
def fresh_channel_layer():
    """Each test gets its own layer instance (event loops differ between tests), and
    the Redis keys a test left behind are deleted. They are deleted with a plain
    client rather than ``layer.flush()``: that also closes every event loop's pool,
    including the one the background publisher's loop owns, from the wrong loop."""
    channel_layers.backends.clear()
    yield
    assert events_flush()
    layer = channel_layers.backends.get("default")
    if isinstance(layer, RedisChannelLayer):
        client = redis.Redis.from_url(settings.REDIS_URL)
        try:
            for key in client.scan_iter(match=f"{layer.prefix}*"):
                client.delete(key)
        finally:
            client.close()
    elif layer is not None and hasattr(layer, "flush"):
        async_to_sync(layer.flush)()
    channel_layers.backends.clear()


def _execution(workspace, user) -> Execution:
    agent = Agent.objects.create(
        workspace=workspace, name="Probe", business_function="data_analyst", owner=user, status=Agent.Status.ACTIVE
    )
    version = AgentVersion.objects.create(
        agent=agent, version=1, goal="Answer questions.", instructions="Be brief.", action_level="read_only"
    )
    return Execution.objects.create(workspace=workspace, agent=agent, agent_version=version, requested_by=user)


@pytest.fixture
def run(workspace, owner):
    return _execution(workspace, owner)


@pytest.fixture
def other_run(other_workspace, outsider):
    return _execution(other_workspace, outsider)


@pytest.fixture
def token(owner):
    return token_issue(user=owner).plaintext


def _bearer(path: str, token: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, subprotocols=["bearer", token])


def _connect(communicator: WebsocketCommunicator):
    """Connect and return (accepted, selected subprotocol or close code)."""

    async def go():
        return await communicator.connect(timeout=TIMEOUT)

    return async_to_sync(go)()


def test_bearer_token_is_accepted_and_only_bearer_is_selected(run, token):
    async def scenario():
        communicator = _bearer(f"/ws/executions/{run.pk}/", token)
        connected, subprotocol = await communicator.connect(timeout=TIMEOUT)
        await communicator.disconnect()
        return connected, subprotocol

    connected, subprotocol = async_to_sync(scenario)()
    assert connected is True
    assert subprotocol == "bearer"
    assert token not in str(subprotocol)


def test_bad_token_is_refused(run, token):
    assert _connect(_bearer(f"/ws/executions/{run.pk}/", token + "x"))[0] is False
    assert _connect(_bearer(f"/ws/executions/{run.pk}/", "rvr_nothere_secret"))[0] is False
    assert _connect(_bearer("/ws/workspace/", "not-a-token"))[0] is False


def test_no_credentials_is_refused(run):
    communicator = WebsocketCommunicator(
        application, f"/ws/executions/{run.pk}/", headers=[(b"origin", b"http://localhost")]
    )
    assert _connect(communicator)[0] is False


def test_other_workspaces_run_is_refused(other_run, token):
    assert _connect(_bearer(f"/ws/executions/{other_run.pk}/", token))[0] is False


def test_missing_run_is_refused_like_a_foreign_one(run, token):
    assert _connect(_bearer(f"/ws/executions/{run.pk + 100000}/", token))[0] is False


def test_other_workspace_feed_is_refused(workspace, other_workspace, token):
    assert _connect(_bearer(f"/ws/workspace/?workspace={other_workspace.pk}", token))[0] is False
    assert _connect(_bearer(f"/ws/workspace/?workspace={workspace.pk}", token))[0] is True


def test_revoked_token_is_refused(run, owner):
    from tenancy.services import token_revoke

    issued = token_issue(user=owner)
    token_revoke(user=owner, token_id=issued.token.pk)
    assert _connect(_bearer(f"/ws/executions/{run.pk}/", issued.plaintext))[0] is False


def _publish_committed(workspace_id: int, execution_id: int, event: dict) -> None:
    with transaction.atomic():
        event_publish(workspace_id=workspace_id, execution_id=execution_id, event=event)


def test_event_published_after_commit_reaches_run_and_workspace_sockets(run, token):
    event = {"type": "run_started", "seq": 1, "execution_id": run.pk, "agent_id": str(run.agent_id)}

    async def scenario():
        run_socket = _bearer(f"/ws/executions/{run.pk}/", token)
        feed_socket = _bearer(f"/ws/workspace/?workspace={run.workspace_id}", token)
        assert (await run_socket.connect(timeout=TIMEOUT))[0]
        assert (await feed_socket.connect(timeout=TIMEOUT))[0]
        await database_sync_to_async(_publish_committed)(run.workspace_id, run.pk, event)
        on_run = json.loads(await run_socket.receive_from(timeout=TIMEOUT))
        on_feed = json.loads(await feed_socket.receive_from(timeout=TIMEOUT))
        await run_socket.disconnect()
        await feed_socket.disconnect()
        return on_run, on_feed

    on_run, on_feed = async_to_sync(scenario)()
    assert on_run == event
    assert on_feed == event


def test_event_of_a_rolled_back_transaction_is_never_sent(run, token):
    def publish_then_roll_back():
        with pytest.raises(RuntimeError), transaction.atomic():
            event_publish(workspace_id=run.workspace_id, execution_id=run.pk, event={"type": "ghost", "seq": 1})
            raise RuntimeError("roll back")
        _publish_committed(run.workspace_id, run.pk, {"type": "real", "seq": 2})

    async def scenario():
        socket = _bearer(f"/ws/executions/{run.pk}/", token)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        await database_sync_to_async(publish_then_roll_back)()
        first = json.loads(await socket.receive_from(timeout=TIMEOUT))
        nothing_else = await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()
        return first, nothing_else

    first, nothing_else = async_to_sync(scenario)()
    assert first["type"] == "real"
    assert nothing_else is True


def test_reconnect_replays_stored_events_after_seq_then_live_ones(run, token):
    for seq, kind in enumerate(["run_started", "turn_reasoning", "tool_called", "observation_received"], start=1):
        ExecutionEvent.objects.create(execution=run, seq=seq, event_type=kind, payload={"turn": 1})

    async def scenario():
        socket = _bearer(f"/ws/executions/{run.pk}/?after=2", token)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        replayed = [json.loads(await socket.receive_from(timeout=TIMEOUT)) for _ in range(2)]
        # A live event the client has already seen through replay is not sent twice.
        await database_sync_to_async(_publish_committed)(
            run.workspace_id, run.pk, {"type": "observation_received", "seq": 4, "execution_id": run.pk}
        )
        await database_sync_to_async(_publish_committed)(
            run.workspace_id, run.pk, {"type": "turn_complete", "seq": 5, "execution_id": run.pk, "turn": 1}
        )
        live = json.loads(await socket.receive_from(timeout=TIMEOUT))
        nothing_else = await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()
        return replayed, live, nothing_else

    replayed, live, nothing_else = async_to_sync(scenario)()
    assert [(e["seq"], e["type"]) for e in replayed] == [(3, "tool_called"), (4, "observation_received")]
    stored = ExecutionEvent.objects.get(execution=run, seq=3)
    assert replayed[0] == {"type": "tool_called", "seq": 3, "execution_id": run.pk,
                           "created_at": stored.created_at.isoformat(), "turn": 1}
    assert (live["seq"], live["type"]) == (5, "turn_complete")
    assert nothing_else is True


def test_without_after_every_stored_event_is_replayed(run, token):
    ExecutionEvent.objects.create(execution=run, seq=1, event_type="run_started", payload={})
    ExecutionEvent.objects.create(execution=run, seq=2, event_type="run_completed", payload={"status": "completed"})

    async def scenario():
        socket = _bearer(f"/ws/executions/{run.pk}/", token)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        events = [json.loads(await socket.receive_from(timeout=TIMEOUT)) for _ in range(2)]
        await socket.disconnect()
        return events

    assert [e["seq"] for e in async_to_sync(scenario)()] == [1, 2]


def test_replay_pages_through_long_histories(run, token, monkeypatch):
    monkeypatch.setattr("executions.consumers.REPLAY_BATCH", 2)
    for seq in range(1, 6):
        ExecutionEvent.objects.create(execution=run, seq=seq, event_type="turn_complete", payload={"turn": seq})

    async def scenario():
        socket = _bearer(f"/ws/executions/{run.pk}/", token)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        events = [json.loads(await socket.receive_from(timeout=TIMEOUT)) for _ in range(5)]
        nothing_else = await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()
        return events, nothing_else

    events, nothing_else = async_to_sync(scenario)()
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
    assert nothing_else is True


def _session_headers(user, origin: bytes) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [(b"origin", origin), (b"cookie", cookie.encode())]


def test_browser_session_from_same_origin_is_accepted_without_subprotocol(run, owner):
    communicator = WebsocketCommunicator(
        application, f"/ws/executions/{run.pk}/", headers=_session_headers(owner, b"http://localhost")
    )
    assert _connect(communicator) == (True, None)


def test_browser_session_from_foreign_origin_is_refused(run, owner):
    communicator = WebsocketCommunicator(
        application, f"/ws/executions/{run.pk}/", headers=_session_headers(owner, b"http://evil.example")
    )
    assert _connect(communicator)[0] is False


def test_broken_channel_layer_does_not_break_the_publisher(run, monkeypatch, caplog):
    class Broken:
        async def group_send(self, group, message):
            raise ConnectionError("layer down")

    monkeypatch.setattr("telemetry.events.get_channel_layer", lambda: Broken())
    with transaction.atomic():
        event_publish(workspace_id=run.workspace_id, execution_id=run.pk, event={"type": "run_started"})
    assert events_flush()
    assert "could not publish run_started" in caplog.text

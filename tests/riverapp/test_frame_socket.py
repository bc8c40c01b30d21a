"""The frame's socket (/ws/frame/): who may open it, and which hints it passes on."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.utils import timezone

from governance.models import Notification
from governance.notifications import _in_app, notifications_mark_read
from riverapp.asgi import application
from telemetry.events import event_publish
from tenancy.services import token_issue
from tests.executions.test_consumers import fresh_channel_layer  # noqa: F401 - autouse fixture

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 5


def _socket(path: str, token: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, subprotocols=["bearer", token])


def _token(user) -> str:
    return token_issue(user=user).plaintext


def test_a_workspace_of_another_organization_is_refused(owner, workspace, other_workspace):
    token = _token(owner)

    async def scenario():
        foreign = _socket(f"/ws/frame/?workspace={other_workspace.pk}", token)
        own = _socket(f"/ws/frame/?workspace={workspace.pk}", token)
        results = (await foreign.connect(timeout=TIMEOUT))[0], (await own.connect(timeout=TIMEOUT))[0]
        await own.disconnect()
        return results

    assert async_to_sync(scenario)() == (False, True)


def test_an_anonymous_browser_is_refused(workspace):
    async def scenario():
        socket = WebsocketCommunicator(application, f"/ws/frame/?workspace={workspace.pk}",
                                       headers=[(b"origin", b"http://localhost")])
        return (await socket.connect(timeout=TIMEOUT))[0]

    assert async_to_sync(scenario)() is False


def _publish(workspace_id: int, events: list[dict]) -> None:
    with transaction.atomic():
        for event in events:
            event_publish(workspace_id=workspace_id, execution_id=7, event=event)


def test_only_approval_events_pass_and_once_per_kind(owner, workspace):
    token = _token(owner)

    async def scenario():
        socket = _socket(f"/ws/frame/?workspace={workspace.pk}", token)
        assert (await socket.connect(timeout=TIMEOUT))[0]
        await database_sync_to_async(_publish)(workspace.pk, [
            {"type": "turn_reasoning", "seq": 1, "thought_summary": "secret thoughts"},
            {"type": "approval_required", "seq": 2, "approval_id": "x", "tool_name": "write_back"},
        ])
        first = json.loads(await socket.receive_from(timeout=TIMEOUT))
        await database_sync_to_async(_publish)(workspace.pk, [{"type": "approval_resolved", "seq": 3}])
        second = json.loads(await socket.receive_from(timeout=TIMEOUT))
        quiet = await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()
        return first, second, quiet

    first, second, quiet = async_to_sync(scenario)()
    assert first == {"type": "approval_required"}  # a hint: no payload, no reasoning
    assert second == {"type": "approval_resolved"}
    assert quiet is True


def test_a_new_notification_and_a_mark_read_reach_only_their_user(owner, member, workspace):
    def notify_owner():
        with transaction.atomic():
            _in_app(workspace_id=workspace.pk, users=[owner], kind="run_outcome", title="Run 1 failed", body="",
                    url="/runs/1/")

    def owner_reads():
        notifications_mark_read(user=owner)

    owner_token, member_token = _token(owner), _token(member)

    async def scenario():
        mine = _socket("/ws/frame/", owner_token)  # no workspace: the user's own feed only
        theirs = _socket(f"/ws/frame/?workspace={workspace.pk}", member_token)
        assert (await mine.connect(timeout=TIMEOUT))[0]
        assert (await theirs.connect(timeout=TIMEOUT))[0]
        await database_sync_to_async(notify_owner)()
        created = json.loads(await mine.receive_from(timeout=TIMEOUT))
        await database_sync_to_async(owner_reads)()
        read = json.loads(await mine.receive_from(timeout=TIMEOUT))
        member_heard_nothing = await theirs.receive_nothing(timeout=0.3)
        await mine.disconnect()
        await theirs.disconnect()
        return created, read, member_heard_nothing

    created, read, member_heard_nothing = async_to_sync(scenario)()
    assert created == read == {"type": "notifications_changed"}
    assert member_heard_nothing is True
    assert Notification.objects.get().read_at <= timezone.now()

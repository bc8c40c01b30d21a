"""WebSocket consumers: they authorize, join one group and forward events.

Authentication happens before these run (riverapp.routing puts ``scope["user"]``
and ``scope["auth_method"]`` in place). A consumer refuses the handshake, before
accepting, when the user is anonymous or the run / workspace is not theirs; the
client sees the same refusal whether the object is elsewhere or does not exist.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from executions.models import ExecutionEvent
from executions.selectors import execution_get_for_user
from rivercore.errors import NotFound
from rivercore.events import event_message
from telemetry.events import execution_group, workspace_group
from tenancy.selectors import workspace_get_for_user, workspaces_for_user

logger = logging.getLogger(__name__)

BEARER_SUBPROTOCOL = "bearer"
REPLAY_BATCH = 500


def _query_param(scope, name: str) -> str | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin1")).get(name)
    return values[-1] if values else None


@database_sync_to_async
def _execution_workspace_id(user, execution_id) -> int | None:
    try:
        return execution_get_for_user(user=user, execution_id=execution_id).workspace_id
    except NotFound:
        return None


@database_sync_to_async
def _stored_events(execution_id: int, after: int) -> list[dict]:
    rows = ExecutionEvent.objects.filter(execution_id=execution_id, seq__gt=after).order_by("seq")[:REPLAY_BATCH]
    # Same shape as the live events the journal publishes.
    return [event_message(event_type=row.event_type, seq=row.seq, execution_id=execution_id,
                          created_at=row.created_at, payload=row.payload) for row in rows]


@database_sync_to_async
def _workspace_id_for(user, requested) -> int | None:
    try:
        if requested is not None:
            return workspace_get_for_user(user=user, workspace_id=requested).pk
    except NotFound:
        return None
    return workspaces_for_user(user=user).order_by("pk").values_list("pk", flat=True).first()


class _EventConsumer(AsyncWebsocketConsumer):
    groups_joined: list[str]

    async def _authorized_group(self) -> str | None:
        raise NotImplementedError

    async def connect(self):
        self.groups_joined = []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        group = await self._authorized_group()
        if group is None:
            await self.close()
            return
        await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined.append(group)
        subprotocol = BEARER_SUBPROTOCOL if self.scope.get("auth_method") == "bearer" else None
        await self.accept(subprotocol=subprotocol)
        await self.after_accept()

    async def after_accept(self) -> None:
        return None

    async def disconnect(self, code):
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = []

    async def receive(self, text_data=None, bytes_data=None):
        # Server-to-client feed: anything the client sends is ignored.
        return None

    async def river_events(self, message):
        for event in message["events"]:
            await self.send_event(event)

    async def send_event(self, event: dict) -> None:
        await self.send(text_data=json.dumps(event, default=str))


class ExecutionConsumer(_EventConsumer):
    """``/ws/executions/<id>/?after=<seq>``: stored events after ``seq``, then live ones.

    The consumer joins the group before reading the stored events, so an event
    committed in between arrives both ways; sequence numbers drop the duplicate.
    """

    last_seq: int = 0

    async def _authorized_group(self) -> str | None:
        self.execution_id = int(self.scope["url_route"]["kwargs"]["execution_id"])
        workspace_id = await _execution_workspace_id(self.scope["user"], self.execution_id)
        if workspace_id is None:
            return None
        try:
            self.last_seq = max(int(_query_param(self.scope, "after") or 0), 0)
        except ValueError:
            self.last_seq = 0
        return execution_group(self.execution_id)

    async def after_accept(self) -> None:
        while True:
            batch = await _stored_events(self.execution_id, self.last_seq)
            for event in batch:
                await self.send_event(event)
            if len(batch) < REPLAY_BATCH:
                return

    async def send_event(self, event: dict) -> None:
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq <= self.last_seq:
                return
            self.last_seq = seq
        await super().send_event(event)


class WorkspaceConsumer(_EventConsumer):
    """``/ws/workspace/?workspace=<id>``: live events of every run in one workspace.

    Without ``workspace`` the user's first workspace is used.
    """

    async def _authorized_group(self) -> str | None:
        workspace_id = await _workspace_id_for(self.scope["user"], _query_param(self.scope, "workspace"))
        if workspace_id is None:
            return None
        self.workspace_id = workspace_id
        return workspace_group(workspace_id)

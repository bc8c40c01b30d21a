"""The page frame's socket: tells an open page that its live counts may have changed.

``/ws/frame/?workspace=<id>`` joins two groups: the workspace's (every run event of the
workspace passes through it; only the approval events go on to the browser) and the
user's own (their notifications). What the browser receives is a hint, ``{"type": ...}``,
never a count or a row: the page then asks ``/nav/counts`` with its own session, so
the numbers it shows always come from the same tenant-scoped queries as a page load.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from executions.consumers import BEARER_SUBPROTOCOL
from governance.notifications import NOTIFICATIONS_CHANGED
from rivercore.errors import NotFound
from rivercore.events import RunEventType
from telemetry.events import user_group, workspace_group
from tenancy.selectors import workspace_get_for_user

# The workspace events that change someone's pending-approvals count.
APPROVAL_EVENTS = frozenset({RunEventType.APPROVAL_REQUIRED.value, RunEventType.APPROVAL_RESOLVED.value})
FORWARDED = APPROVAL_EVENTS | {NOTIFICATIONS_CHANGED}


def _requested_workspace(scope) -> str | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin1")).get("workspace")
    return values[-1] if values else None


@database_sync_to_async
def _workspace_id(user, requested: str | None) -> int | None:
    if not requested:
        return None
    try:
        return workspace_get_for_user(user=user, workspace_id=requested).pk
    except NotFound:
        return None


class FrameConsumer(AsyncWebsocketConsumer):
    groups_joined: list[str]

    async def connect(self):
        self.groups_joined = []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        groups = [user_group(user.pk)]
        requested = _requested_workspace(self.scope)
        if requested:
            workspace_id = await _workspace_id(user, requested)
            if workspace_id is None:  # another tenant's workspace, or none: refused alike
                await self.close()
                return
            groups.append(workspace_group(workspace_id))
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept(subprotocol=BEARER_SUBPROTOCOL if self.scope.get("auth_method") == "bearer" else None)

    async def disconnect(self, code):
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = []

    async def receive(self, text_data=None, bytes_data=None):
        return None  # server-to-client only

    async def river_events(self, message):
        kinds = [str(event.get("type")) for event in message["events"]]
        # A batch of one run's turn holds many events; one hint per kind is enough.
        for kind in dict.fromkeys(kind for kind in kinds if kind in FORWARDED):
            await self.send(text_data=json.dumps({"type": kind}))

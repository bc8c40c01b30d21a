"""The page frame's socket: tells an open page that its live counts may have changed.

``/ws/frame/?workspace=<id>`` joins two groups: the workspace's (every run event of the
workspace passes through it; only the approval events go on to the browser) and the
user's own (their notifications). What the browser receives is a hint, ``{"type": ...}``,
never a count or a row: the page then asks ``/nav/counts`` with its own session, so
the numbers it shows always come from the same tenant-scoped queries as a page load.
"""

from __future__ import annotations

import json

from channels.db import database_sync_to_async

from governance.notifications import NOTIFICATIONS_CHANGED
from rivercore.errors import NotFound
from rivercore.events import RunEventType
from telemetry.events import user_group, workspace_group
from tenancy.selectors import workspace_get_for_user
from tenancy.sockets import AuthorizedSocketConsumer, query_param

# The workspace events that change someone's pending-approvals count.
APPROVAL_EVENTS = frozenset({RunEventType.APPROVAL_REQUIRED.value, RunEventType.APPROVAL_RESOLVED.value})
FORWARDED = APPROVAL_EVENTS | {NOTIFICATIONS_CHANGED}


@database_sync_to_async
def _workspace_id(user, requested: str | None) -> int | None:
    if not requested:
        return None
    try:
        return workspace_get_for_user(user=user, workspace_id=requested).pk
    except NotFound:
        return None


class FrameConsumer(AuthorizedSocketConsumer):
    async def authorized_groups(self) -> list[str] | None:
        user = self.scope["user"]
        groups = [user_group(user.pk)]
        requested = query_param(self.scope, "workspace")
        if requested:
            workspace_id = await _workspace_id(user, requested)
            if workspace_id is None:  # another tenant's workspace, or none: refused alike
                return None
            groups.append(workspace_group(workspace_id))
        return groups

    async def river_events(self, message):
        kinds = [str(event.get("type")) for event in message["events"]]
        # A batch of one run's turn holds many events; one hint per kind is enough.
        for kind in dict.fromkeys(kind for kind in kinds if kind in FORWARDED):
            await self.send(text_data=json.dumps({"type": kind}))

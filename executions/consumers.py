"""WebSocket consumers: they authorize, join one group and forward events.

Authentication happens before these run (riverapp.routing puts ``scope["user"]``
and ``scope["auth_method"]`` in place); opening and closing is
``tenancy.sockets.AuthorizedSocketConsumer``'s, the same as the page frame's socket. A
consumer refuses the handshake, before accepting, when the user is anonymous or the run /
workspace is not theirs; the client sees the same refusal whether the object is elsewhere
or does not exist.
"""

from __future__ import annotations

import json
import logging

from channels.db import database_sync_to_async
from django.db.models import Q

from common.ids import count_from_text
from executions.models import ExecutionEvent
from executions.selectors import execution_get_for_user, session_event_message, session_events, session_get_for_user
from rivercore.errors import NotFound
from rivercore.events import event_message
from telemetry.events import execution_group, session_group, workspace_group
from tenancy.selectors import workspace_get_for_user, workspaces_for_user
from tenancy.sockets import BEARER_SUBPROTOCOL, AuthorizedSocketConsumer, query_param

logger = logging.getLogger(__name__)

__all__ = ["BEARER_SUBPROTOCOL", "ExecutionConsumer", "SessionConsumer", "WorkspaceConsumer"]

REPLAY_BATCH = 500


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


class _EventConsumer(AuthorizedSocketConsumer):
    """One group's events, forwarded as JSON."""

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

    async def authorized_groups(self) -> list[str] | None:
        self.execution_id = int(self.scope["url_route"]["kwargs"]["execution_id"])
        workspace_id = await _execution_workspace_id(self.scope["user"], self.execution_id)
        if workspace_id is None:
            return None
        self.last_seq = count_from_text(query_param(self.scope, "after")) or 0
        return [execution_group(self.execution_id)]

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

    async def authorized_groups(self) -> list[str] | None:
        workspace_id = await _workspace_id_for(self.scope["user"], query_param(self.scope, "workspace"))
        if workspace_id is None:
            return None
        self.workspace_id = workspace_id
        return [workspace_group(workspace_id)]


@database_sync_to_async
def _session_id_for(user, session_id) -> int | None:
    try:
        return session_get_for_user(user=user, session_id=session_id).pk
    except NotFound:
        return None


@database_sync_to_async
def _stored_session_events(session_id: int, after: int) -> list[dict]:
    rows = session_events(session_id=session_id, after=after, limit=REPLAY_BATCH)
    return [session_event_message(row) for row in rows]


@database_sync_to_async
def _session_seqs(session_id: int, keys: list[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """The ids (``session_seq``) of stored events named by (run, seq): one query per batch."""
    by_run: dict[int, list[int]] = {}
    for execution_id, seq in keys:
        by_run.setdefault(execution_id, []).append(seq)
    match = Q()
    for execution_id, seqs in by_run.items():
        match |= Q(execution_id=execution_id, seq__in=seqs)
    rows = ExecutionEvent.objects.filter(match, execution__session_id=session_id).values_list(
        "execution_id", "seq", "pk")
    return {(execution_id, seq): pk for execution_id, seq, pk in rows}


class SessionConsumer(_EventConsumer):
    """``/ws/sessions/<id>/?after=<session_seq>``: the session's stored events after the
    cursor (the REST stream's items), then live ones: every event of its runs with its
    ``session_seq``, their streamed pieces and status messages (no ``session_seq``: not
    stored), and ``message_queued`` notices. Only the session's creator may listen.

    Joins the group before replaying, like ``ExecutionConsumer``: an event committed in
    between arrives both ways and ``session_seq`` drops the duplicate."""

    last_session_seq: int = 0

    async def authorized_groups(self) -> list[str] | None:
        session_id = await _session_id_for(self.scope["user"], self.scope["url_route"]["kwargs"]["session_id"])
        if session_id is None:
            return None
        self.session_id = session_id
        self.last_session_seq = count_from_text(query_param(self.scope, "after")) or 0
        return [session_group(session_id)]

    async def after_accept(self) -> None:
        while True:
            batch = await _stored_session_events(self.session_id, self.last_session_seq)
            for event in batch:
                await self.send_event(event)
            if len(batch) < REPLAY_BATCH:
                return

    async def river_events(self, message):
        events = message["events"]
        stored = [(e["execution_id"], e["seq"]) for e in events
                  if isinstance(e.get("seq"), int) and isinstance(e.get("execution_id"), int)]
        seqs = await _session_seqs(self.session_id, stored) if stored else {}
        for event in events:
            if isinstance(event.get("seq"), int) and "session_seq" not in event:
                session_seq = seqs.get((event.get("execution_id"), event["seq"]))
                if session_seq is None:
                    continue  # not this session's (cannot happen: the group is the session's)
                event = {**event, "session_seq": session_seq}
            await self.send_event(event)

    async def send_event(self, event: dict) -> None:
        session_seq = event.get("session_seq")
        if isinstance(session_seq, int):
            if session_seq <= self.last_session_seq:
                return
            self.last_session_seq = session_seq
        await super().send_event(event)

"""Live events for browsers and API clients, sent over the Channels layer.

Events go out only after the surrounding transaction commits, so a client never
hears about a row it could not yet read. Delivery is best effort: the stored
ExecutionEvent rows are the record, and a WebSocket client that reconnects replays
them from its last sequence number. A broken channel layer therefore must never
fail the run that publishes; it is logged and dropped.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

# The channel-layer message type; consumers handle it in ``river_event``.
EVENT_MESSAGE_TYPE = "river.event"


def execution_group(execution_id: int) -> str:
    return f"execution.{int(execution_id)}"


def workspace_group(workspace_id: int) -> str:
    return f"workspace.{int(workspace_id)}"


def _send(groups: list[str], event: dict) -> None:
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        message = {"type": EVENT_MESSAGE_TYPE, "event": event}
        for group in groups:
            async_to_sync(layer.group_send)(group, message)
    except Exception:  # noqa: BLE001 - telemetry must never break a run
        logger.warning("could not publish %s event to %s", event.get("type", "?"), ", ".join(groups), exc_info=True)


def event_publish(*, workspace_id: int, execution_id: int | None, event: dict) -> None:
    """Send ``event`` to the workspace's group (and the run's group) after commit.

    Outside a transaction it is sent at once. ``event`` must be JSON-serialisable.
    """
    groups = [workspace_group(workspace_id)]
    if execution_id is not None:
        groups.insert(0, execution_group(execution_id))
    payload = dict(event)
    transaction.on_commit(lambda: _send(groups, payload))


def _send_all(groups: list[str], events: list[dict]) -> None:
    try:
        layer = get_channel_layer()
        if layer is None:
            return

        async def send() -> None:
            for event in events:
                message = {"type": EVENT_MESSAGE_TYPE, "event": event}
                for group in groups:
                    await layer.group_send(group, message)

        async_to_sync(send)()
    except Exception:  # noqa: BLE001 - telemetry must never break a run
        kinds = ", ".join(str(e.get("type", "?")) for e in events)
        logger.warning("could not publish %s event(s) to %s", kinds, ", ".join(groups), exc_info=True)


def events_publish(*, workspace_id: int, execution_id: int | None, events: list[dict]) -> None:
    """``event_publish`` for several events of one transaction, in order, in one
    hand-off to the channel layer after commit. Each ``async_to_sync`` call costs a
    thread and an event loop (and, with Redis, a connection), so a run's journal
    publishes a turn's events together rather than one by one."""
    if not events:
        return
    groups = [workspace_group(workspace_id)]
    if execution_id is not None:
        groups.insert(0, execution_group(execution_id))
    payload = [dict(event) for event in events]
    transaction.on_commit(lambda: _send_all(groups, payload))

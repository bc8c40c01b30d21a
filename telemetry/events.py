"""Live events for browsers and API clients, sent over the Channels layer.

Events go out only after the surrounding transaction commits, so a client never
hears about a row it could not yet read. Delivery is best effort: the stored
ExecutionEvent rows are the record, and a WebSocket client that reconnects replays
them from its last sequence number. A broken channel layer therefore must never
fail the run that publishes; it is logged and dropped.

Sending happens on one background thread per process (the publisher), which keeps
a single event loop for its whole life. The committing thread only hands the batch to
that loop, so a run's turn does not wait for the channel layer, and with Redis the
layer's connection pool (one per event loop) is reused instead of being rebuilt for
every batch. Batches of different runs are sent concurrently (with hundreds of runs
publishing, one run's round trips to Redis do not queue behind another's); the
batches of one run, and those about no run, are sent one after another in the order
they were committed in this process.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time

from channels.layers import get_channel_layer
from django.db import transaction

from telemetry.faults import infra_fault_record

logger = logging.getLogger(__name__)

# The channel-layer message type; consumers handle it in ``river_events``. One
# message carries the events of one committed transaction, in order, so a turn
# costs one ``group_send`` per group (with Redis, each is several round trips).
EVENT_MESSAGE_TYPE = "river.events"
FLUSH_TIMEOUT_SECONDS = 5.0
# A channel layer that accepts the connection but never answers (Redis stuck, a
# network partition) must not hold the publisher: the batch is dropped after this.
SEND_TIMEOUT_SECONDS = 3.0


def execution_group(execution_id: int) -> str:
    return f"execution.{int(execution_id)}"


def workspace_group(workspace_id: int) -> str:
    return f"workspace.{int(workspace_id)}"


def session_group(session_id: int) -> str:
    """A conversation's feed: the events of every run of one session (docs/sessions.md)."""
    return f"session.{int(session_id)}"


def user_group(user_id: int) -> str:
    """One person's feed: what changed for them alone (their notifications)."""
    return f"user.{int(user_id)}"


async def _send_batch(groups: list[str], events: list[dict]) -> None:
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        message = {"type": EVENT_MESSAGE_TYPE, "events": events}
        if hasattr(layer, "group_send_many"):  # River's Redis layer: one round trip when nobody watches
            sending = layer.group_send_many(groups, message)
        else:  # the run's group and the workspace's at once: each is its own round trips
            sending = asyncio.gather(*(layer.group_send(group, message) for group in groups))
        await asyncio.wait_for(sending, SEND_TIMEOUT_SECONDS)
    except Exception as exc:  # noqa: BLE001 - telemetry must never break a run
        # The events are journaled with their step; a client that reconnects replays them.
        infra_fault_record(component="channel_layer", operation="group_send", exc=exc, log=False)
        kinds = ", ".join(str(e.get("type", "?")) for e in events)
        logger.warning("could not publish %s event(s) to %s (%s); clients replay them from the journal",
                       kinds, ", ".join(groups), exc.__class__.__name__)


class _Publisher:
    """The per-process sending thread and its event loop. It is started on first use and
    again in a forked child (a Celery prefork worker inherits the object but not the
    thread).

    Committing threads append their batch to an inbox and wake the loop only when it is
    not already due to look (one wake-up for a burst of commits). On the loop, each run
    (its ``key``) has at most one sender task, which sends that run's batches in commit
    order; batches that queued up behind a send in flight go out together as one message
    (up to ``MERGE_MAX_EVENTS`` events), since a message carries a list of events anyway.
    Different runs' senders run concurrently."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: list[tuple[object, list[str], list[dict]]] = []
        self._woken = False
        self._queued: dict[object, list[tuple[list[str], list[dict]]]] = {}
        self._senders: dict[object, asyncio.Task] = {}

    def submit(self, groups: list[str], events: list[dict], key: object = None) -> None:
        loop = self._running_loop()
        with self._lock:
            self._inbox.append((key, groups, events))
            if self._woken:
                return
            self._woken = True
        loop.call_soon_threadsafe(self._take_inbox)

    def flush(self, timeout: float = FLUSH_TIMEOUT_SECONDS) -> bool:
        """Wait until everything submitted so far has been handed to the layer."""
        if self._pid != os.getpid():
            return True  # nothing was submitted from this process
        done = threading.Event()
        self._running_loop().call_soon_threadsafe(self._when_sent, done)
        return done.wait(timeout)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        pid = os.getpid()
        if self._pid != pid:
            with self._lock:
                if self._pid != pid:
                    loop = asyncio.new_event_loop()
                    threading.Thread(target=loop.run_forever, name="river-events", daemon=True).start()
                    self._loop, self._queued, self._senders, self._pid = loop, {}, {}, pid
                    self._inbox, self._woken = [], False
        return self._loop

    def _take_inbox(self) -> None:
        with self._lock:
            inbox, self._inbox, self._woken = self._inbox, [], False
        for key, groups, events in inbox:
            self._queued.setdefault(key, []).append((groups, events))
            if key not in self._senders:
                self._senders[key] = self._loop.create_task(self._send_queued(key))

    async def _send_queued(self, key: object) -> None:
        try:
            while batches := self._queued.pop(key, None):
                for groups, events in _merged(batches):
                    await _send_batch(groups, events)  # its failure is its own (logged there)
        finally:
            self._senders.pop(key, None)

    def _when_sent(self, done: threading.Event) -> None:
        self._take_inbox()  # what was submitted before the flush, not yet picked up
        pending = list(self._senders.values())
        if not pending:
            done.set()
            return
        self._loop.create_task(asyncio.wait(pending)).add_done_callback(lambda _: done.set())


MERGE_MAX_EVENTS = 200


def _merged(batches: list[tuple[list[str], list[dict]]]) -> list[tuple[list[str], list[dict]]]:
    """Consecutive batches for the same groups as one, in order, up to MERGE_MAX_EVENTS events."""
    merged: list[tuple[list[str], list[dict]]] = []
    for groups, events in batches:
        if merged and merged[-1][0] == groups and len(merged[-1][1]) + len(events) <= MERGE_MAX_EVENTS:
            merged[-1][1].extend(events)
        else:
            merged.append((groups, list(events)))
    return merged


_publisher = _Publisher()
atexit.register(_publisher.flush, 2.0)


def events_flush(timeout: float = FLUSH_TIMEOUT_SECONDS) -> bool:
    """Block until this process's committed events have been sent (or ``timeout``
    passes; returns False then): tests, and the process at exit. A segment does not
    wait for its events: they go out on the publisher while the caller goes on."""
    return _publisher.flush(timeout)


def _groups(workspace_id: int, execution_id: int | None, session_id: int | None = None) -> list[str]:
    groups = [workspace_group(workspace_id)]
    if session_id is not None:
        groups.insert(0, session_group(session_id))
    if execution_id is not None:
        groups.insert(0, execution_group(execution_id))
    return groups


def _submit_on_commit(workspace_id: int, execution_id: int | None, events: list[dict],
                      session_id: int | None = None) -> None:
    groups = _groups(workspace_id, execution_id, session_id)
    payload = [dict(event) for event in events]
    transaction.on_commit(lambda: _publisher.submit(groups, payload, key=execution_id))


def event_publish(*, workspace_id: int, execution_id: int | None, event: dict,
                  session_id: int | None = None) -> None:
    """Send ``event`` to the workspace's group (and the run's group, and the session's
    when the run belongs to one) after commit.

    Outside a transaction it is handed to the publisher at once. ``event`` must be
    JSON-serialisable.
    """
    _submit_on_commit(workspace_id, execution_id, [event], session_id)


def events_publish(*, workspace_id: int, execution_id: int | None, events: list[dict],
                   session_id: int | None = None) -> None:
    """``event_publish`` for the events of one transaction, kept in order and handed
    over as one batch."""
    if events:
        _submit_on_commit(workspace_id, execution_id, events, session_id)


def events_publish_committed(*, workspace_id: int, execution_id: int | None, events: list[dict],
                             session_id: int | None = None) -> None:
    """Hand over events whose rows have already committed, possibly on another
    connection than this thread's (the journal's write-behind), so there is no
    transaction of this thread's to wait for."""
    if events:
        _publisher.submit(_groups(workspace_id, execution_id, session_id), events, key=execution_id)


def session_event_publish(*, session_id: int, event: dict) -> None:
    """A notice about a session that no run carries yet (a message queued behind the
    active run), to the session's feed only, after commit. Not stored: the session's
    messages are the record."""
    payload = dict(event)
    group = session_group(session_id)
    transaction.on_commit(lambda: _publisher.submit([group], [payload]))


def user_event_publish(*, user_ids: list[int], event: dict) -> None:
    """Send ``event`` to each of these people's feeds after commit (their pages' frame
    listens there). Best effort like every event: the rows are the record."""
    groups = [user_group(user_id) for user_id in sorted(set(user_ids))]
    if groups:
        payload = dict(event)
        transaction.on_commit(lambda: _publisher.submit(groups, [payload]))


# --- partial events: pieces of a model reply, live only ------------------------------------

# How long a run trusts its last answer to "is anyone watching?": a client that connects
# mid-run starts receiving pieces within this time (it has the stored events meanwhile).
WATCHED_TTL_SECONDS = 1.0
WATCHED_TIMEOUT_SECONDS = 0.25
WATCHED_RETRY_SECONDS = 30.0  # after the layer failed to answer


def groups_watched(groups: list[str]) -> list[str]:
    """Which of ``groups`` have a member now. Redis (River's layer): one pipelined round
    trip on the publisher's loop; the in-memory layer: its own table; no layer: none.
    A layer that cannot tell counts as nobody watching; one that fails, or does not
    answer within ``WATCHED_TIMEOUT_SECONDS``, raises."""
    layer = get_channel_layer()
    if layer is None:
        return []
    if hasattr(layer, "groups_watched"):
        future = asyncio.run_coroutine_threadsafe(layer.groups_watched(groups), _publisher._running_loop())
        try:
            return list(future.result(WATCHED_TIMEOUT_SECONDS))
        except BaseException:
            future.cancel()
            raise
    members = getattr(layer, "groups", None)
    if isinstance(members, dict):  # channels' InMemoryChannelLayer (a single process)
        return [group for group in groups if members.get(group)]
    return []


class RunPartials:
    """The partial-event sink of one run (``rivercore.runner.PartialSink``): pieces go to
    the run's group (and its session's) only, never to the workspace feed and never into the event log.
    They share the run's place on the publisher, so they keep their order with the
    run's stored events as far as they were handed over in that order."""

    def __init__(self, execution_id: int, *, session_id: int | None = None, clock=time.monotonic):
        self.execution_id = int(execution_id)
        # A session's run also streams to its conversation's page (``session.<id>``).
        self.groups = [execution_group(execution_id)]
        if session_id is not None:
            self.groups.append(session_group(session_id))
        self._clock = clock
        self._watched: tuple[float, bool] | None = None

    def watched(self) -> bool:
        now = self._clock()
        if self._watched is None or now >= self._watched[0]:
            try:
                self._watched = (now + WATCHED_TTL_SECONDS, bool(groups_watched(self.groups)))
            except Exception as exc:  # noqa: BLE001 - a live nicety, never a run's failure
                # The layer is down or slow: nobody is streamed to, and the run does not
                # ask again for a while (its stored events still reach every client).
                logger.debug("could not ask the channel layer who watches %s: %s", self.groups,
                             exc.__class__.__name__)
                self._watched = (now + WATCHED_RETRY_SECONDS, False)
        return self._watched[1]

    def send(self, event: dict) -> None:
        _publisher.submit(self.groups, [event], key=self.execution_id)

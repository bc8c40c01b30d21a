"""Live events for browsers and API clients, sent over the Channels layer.

Events go out only after the surrounding transaction commits, so a client never
hears about a row it could not yet read. Delivery is best effort: the stored
ExecutionEvent rows are the record, and a WebSocket client that reconnects replays
them from its last sequence number. A broken channel layer therefore must never
fail the run that publishes; it is logged and dropped.

With River's Redis layer (``telemetry.layers``, one Redis host) a committed batch is
sent by the thread that committed it, in one round trip (``group_send_many_now``): no
other thread has to be woken and scheduled first, which in a worker process busy with
hundreds of hosted runs cost far more than the round trip. A batch goes through the
publisher instead when the run still has batches queued there (its streamed pieces
go there: see ``RunPartials``), so a run's messages keep their order, and while the
direct send is off after a failure.

The publisher is one background thread per process with a single event loop for its
whole life; it serves the other layers (the in-memory one, tests' fakes) and the cases
above. The committing thread only hands the batch to that loop, and with Redis the
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
import weakref

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
# After a direct send failed, batches go through the publisher (and its timeout) for this
# long, so a stuck Redis holds a committing thread once, not at every commit.
DIRECT_PAUSE_SECONDS = 30.0


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

    def holds(self, key: object) -> bool:
        """Whether batches of ``key`` are queued or being sent here (a later batch of the
        same run must then follow them here to keep their order)."""
        if self._pid != os.getpid():
            return False
        with self._lock:
            return key in self._senders or any(queued[0] == key for queued in self._inbox)

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
        with self._lock:  # ``holds`` sees a batch either in the inbox or with its sender
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
            with self._lock:
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
_direct_paused_until = 0.0


def _send_committed(groups: list[str], events: list[dict], key: object = None) -> None:
    """Send a committed batch now, on this thread, when the layer can in one round trip
    and nothing of the same run waits on the publisher; else hand it to the publisher."""
    global _direct_paused_until
    layer = get_channel_layer()
    if (layer is None or not getattr(layer, "sends_now", False) or time.monotonic() < _direct_paused_until
            or _publisher.holds(key)):
        _publisher.submit(groups, events, key=key)
        return
    try:
        layer.group_send_many_now(groups, {"type": EVENT_MESSAGE_TYPE, "events": events})
    except Exception as exc:  # noqa: BLE001 - telemetry must never break a run
        _direct_paused_until = time.monotonic() + DIRECT_PAUSE_SECONDS
        infra_fault_record(component="channel_layer", operation="group_send", exc=exc, log=False)
        kinds = ", ".join(str(e.get("type", "?")) for e in events)
        logger.warning("could not publish %s event(s) to %s (%s); clients replay them from the journal; "
                       "events go through the publisher thread for %g s", kinds, ", ".join(groups),
                       exc.__class__.__name__, DIRECT_PAUSE_SECONDS)


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
    transaction.on_commit(lambda: _send_committed(groups, payload, key=execution_id))


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
        _send_committed(_groups(workspace_id, execution_id, session_id), events, key=execution_id)


def session_event_publish(*, session_id: int, event: dict) -> None:
    """A notice about a session that no run carries yet (a message queued behind the
    active run), to the session's feed only, after commit. Not stored: the session's
    messages are the record."""
    payload = dict(event)
    group = session_group(session_id)
    transaction.on_commit(lambda: _send_committed([group], [payload]))


def user_event_publish(*, user_ids: list[int], event: dict) -> None:
    """Send ``event`` to each of these people's feeds after commit (their pages' frame
    listens there). Best effort like every event: the rows are the record."""
    groups = [user_group(user_id) for user_id in sorted(set(user_ids))]
    if groups:
        payload = dict(event)
        transaction.on_commit(lambda: _send_committed(groups, [payload]))


# --- partial events: pieces of a model reply, live only ------------------------------------

# How often this process asks who watches its runs: a client that connects mid-run starts
# receiving pieces from the run's next model call after the next answer (it has the stored
# events meanwhile).
WATCHED_TTL_SECONDS = 1.0
WATCHED_TIMEOUT_SECONDS = 0.25
WATCHED_RETRY_SECONDS = 30.0  # after the layer failed to answer


def groups_watched(groups: list[str]) -> list[str]:
    """Which of ``groups`` have a member now, for a layer that can tell without I/O (the
    in-memory layer: its own table); any other layer: none."""
    members = getattr(get_channel_layer(), "groups", None)
    if isinstance(members, dict):  # channels' InMemoryChannelLayer (a single process)
        return [group for group in groups if members.get(group)]
    return []


class _WatchTable:
    """Who watches the runs of this process, for a layer that must be asked over the
    network (River's Redis layer: ``groups_watched``). One task on the publisher's loop
    asks about the groups of every live sink in one pipelined round trip, at once when a
    sink is added and then every ``WATCHED_TTL_SECONDS``, and writes each sink's answer;
    a model call reads it from memory and never waits for Redis. A sink that is no longer
    referenced (its segment ended) drops out; the task stops when none is left. A layer
    that fails, or does not answer within ``WATCHED_TIMEOUT_SECONDS``, means nobody
    watches, and is asked again after ``WATCHED_RETRY_SECONDS``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sinks: weakref.WeakSet[RunPartials] = weakref.WeakSet()
        self._task: asyncio.Task | None = None
        self._pid: int | None = None
        self._wake: asyncio.Event | None = None
        self.asked = 0  # round trips so far (tests)

    def add(self, sink: RunPartials) -> None:
        loop = _publisher._running_loop()
        with self._lock:
            self._sinks.add(sink)
        loop.call_soon_threadsafe(self._ensure_asking)

    def _ensure_asking(self) -> None:  # on the publisher's loop
        if self._pid != os.getpid() or self._task is None or self._task.done():
            self._pid, self._wake = os.getpid(), asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._ask_forever())
        else:
            self._wake.set()

    async def _ask_forever(self) -> None:
        while True:
            layer = get_channel_layer()
            with self._lock:
                sinks = list(self._sinks)
            if not sinks:
                return
            groups = sorted({group for sink in sinks for group in sink.groups})
            pause = WATCHED_TTL_SECONDS
            try:
                self.asked += 1
                watched = set(await asyncio.wait_for(layer.groups_watched(groups), WATCHED_TIMEOUT_SECONDS))
            except Exception as exc:  # noqa: BLE001 - a live nicety, never a run's failure
                logger.debug("could not ask the channel layer who watches %d group(s): %s", len(groups),
                             exc.__class__.__name__)
                watched, pause = set(), WATCHED_RETRY_SECONDS
            for sink in sinks:
                sink._answer = any(group in watched for group in sink.groups)
                sink._answered.set()
            del sinks
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), pause)
            except TimeoutError:
                pass


_watch_table = _WatchTable()


class RunPartials:
    """The partial-event sink of one run (``rivercore.runner.PartialSink``): pieces go to
    the run's group (and its session's) only, never to the workspace feed and never into the event log.
    They share the run's place on the publisher, so they keep their order with the
    run's stored events as far as they were handed over in that order (a stored batch
    follows the run's pieces still queued there: ``_send_committed``).

    ``watched`` answers from memory: with a layer that must be asked over the network the
    process's watch table (``_WatchTable``) keeps the answer fresh. It is first asked when
    the sink is made (the segment's start), so the run's first model call normally finds
    the answer there; if not, that call waits for it, at most ``WATCHED_TIMEOUT_SECONDS``,
    once a segment."""

    def __init__(self, execution_id: int, *, session_id: int | None = None):
        self.execution_id = int(execution_id)
        # A session's run also streams to its conversation's page (``session.<id>``).
        self.groups = [execution_group(execution_id)]
        if session_id is not None:
            self.groups.append(session_group(session_id))
        self._answer = False
        self._answered = threading.Event()  # the watch table's first answer is in
        self._asks_layer = hasattr(get_channel_layer(), "groups_watched")
        if self._asks_layer:
            _watch_table.add(self)

    def watched(self) -> bool:
        if self._asks_layer:
            if not self._answered.is_set():
                self._answered.wait(WATCHED_TIMEOUT_SECONDS)
            return self._answer
        return bool(groups_watched(self.groups))

    def send(self, event: dict) -> None:
        _publisher.submit(self.groups, [event], key=self.execution_id)

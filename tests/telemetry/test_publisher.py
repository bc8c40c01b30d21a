"""The background publisher: committed batches go out in order, off the caller's
thread, one channel message per group per batch; ``events_flush`` waits for them."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import transaction

from telemetry import events

pytestmark = pytest.mark.django_db(transaction=True)


class RecordingLayer:
    def __init__(self):
        self.sent: list[tuple[str, dict, str]] = []

    async def group_send(self, group, message):
        self.sent.append((group, message, threading.current_thread().name))


@pytest.fixture
def layer(monkeypatch):
    recording = RecordingLayer()
    monkeypatch.setattr(events, "get_channel_layer", lambda: recording)
    return recording


def test_batches_go_out_in_commit_order_in_one_message_per_group(layer):
    for turn in range(1, 4):
        with transaction.atomic():
            events.events_publish(workspace_id=7, execution_id=42, events=[
                {"type": "turn_reasoning", "seq": 2 * turn - 1}, {"type": "turn_complete", "seq": 2 * turn}])
    assert events.events_flush()

    for group in ("execution.42", "workspace.7"):
        messages = [message["events"] for sent_to, message, _ in layer.sent if sent_to == group]
        # Batches that queued behind a send in flight may share a message; never reordered or split.
        assert 1 <= len(messages) <= 3 and all(len(batch) % 2 == 0 for batch in messages)
        assert [e["seq"] for batch in messages for e in batch] == [1, 2, 3, 4, 5, 6]
    assert {message["type"] for _, message, _ in layer.sent} == {"river.events"}
    assert {thread for _, _, thread in layer.sent} == {"river-events"}  # never the committing thread


def test_nothing_is_handed_over_before_commit_or_after_rollback(layer):
    with transaction.atomic():
        events.event_publish(workspace_id=7, execution_id=None, event={"type": "kept"})
        assert events.events_flush()
        assert layer.sent == []  # still inside the transaction
    with pytest.raises(RuntimeError), transaction.atomic():
        events.event_publish(workspace_id=7, execution_id=None, event={"type": "ghost"})
        raise RuntimeError("roll back")
    assert events.events_flush()
    assert [(group, [e["type"] for e in message["events"]]) for group, message, _ in layer.sent] == [
        ("workspace.7", ["kept"])]


def test_a_failing_layer_is_logged_and_the_publisher_keeps_going(monkeypatch, caplog):
    calls = []

    class FlakyLayer:
        async def group_send(self, group, message):
            calls.append(group)
            if len(calls) == 1:
                raise ConnectionError("layer down")

    monkeypatch.setattr(events, "get_channel_layer", lambda: FlakyLayer())
    events.event_publish(workspace_id=1, execution_id=None, event={"type": "first"})
    assert events.events_flush()  # sent (and failed) on its own, not merged with the next
    events.event_publish(workspace_id=1, execution_id=None, event={"type": "second"})
    assert events.events_flush()
    assert "could not publish first" in caplog.text
    assert calls == ["workspace.1", "workspace.1"]


def test_a_forked_child_starts_its_own_publisher_thread(layer, monkeypatch):
    events.event_publish(workspace_id=1, execution_id=None, event={"type": "parent"})
    assert events.events_flush()
    parent_loop = events._publisher._loop
    real_pid = events.os.getpid()
    monkeypatch.setattr(events.os, "getpid", lambda: real_pid + 100000)  # what a child of fork() would see

    events.event_publish(workspace_id=1, execution_id=None, event={"type": "child"})
    assert events.events_flush()

    assert events._publisher._loop is not parent_loop
    assert [message["events"][0]["type"] for _, message, _ in layer.sent] == ["parent", "child"]


def test_runs_are_sent_concurrently_and_each_runs_batches_in_order(monkeypatch):
    """A slow send for one run does not hold another run's events; the held run's later
    batch still waits for its earlier one."""
    import asyncio

    sent: list[tuple[str, list[int]]] = []
    other_sent = threading.Event()

    class SlowForRunOne:
        async def group_send(self, group, message):
            if group == "execution.1" and message["events"][0]["seq"] == 1:
                while not other_sent.is_set():  # held until run two's batch is out
                    await asyncio.sleep(0.001)
            sent.append((group, [e["seq"] for e in message["events"]]))
            if group == "execution.2":
                other_sent.set()

    monkeypatch.setattr(events, "get_channel_layer", lambda: SlowForRunOne())
    with transaction.atomic():
        events.events_publish(workspace_id=7, execution_id=1, events=[{"type": "a", "seq": 1}])
    with transaction.atomic():
        events.events_publish(workspace_id=7, execution_id=1, events=[{"type": "b", "seq": 2}])
    with transaction.atomic():
        events.events_publish(workspace_id=7, execution_id=2, events=[{"type": "c", "seq": 1}])
    assert events.events_flush()
    run_one = [seqs for group, seqs in sent if group == "execution.1"]
    assert [seq for seqs in run_one for seq in seqs] == [1, 2]  # in order, perhaps as one message
    first_of_run_one = next(i for i, (group, _) in enumerate(sent) if group == "execution.1")
    assert sent.index(("execution.2", [1])) < first_of_run_one


def test_batches_queued_behind_a_send_in_flight_go_out_as_one_message(monkeypatch):
    """While a run's batch is being sent, its next commits wait; they then leave together."""
    import asyncio

    release = threading.Event()
    sent: list[list[int]] = []

    class HeldLayer:
        async def group_send(self, group, message):
            if group == "execution.5":
                while not release.is_set():
                    await asyncio.sleep(0.001)
                sent.append([e["seq"] for e in message["events"]])

    monkeypatch.setattr(events, "get_channel_layer", lambda: HeldLayer())
    events.events_publish_committed(workspace_id=7, execution_id=5, events=[{"type": "a", "seq": 1}])
    deadline = time.monotonic() + 10
    while not events._publisher._senders and time.monotonic() < deadline:
        time.sleep(0.001)  # until the first batch is on its way (and held)
    for seq in (2, 3, 4):
        events.events_publish_committed(workspace_id=7, execution_id=5, events=[{"type": "b", "seq": seq}])
    release.set()
    assert events.events_flush()

    assert sent == [[1], [2, 3, 4]]

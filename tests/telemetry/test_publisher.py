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


class SendsNowLayer(RecordingLayer):
    """A layer that can send from synchronous code (as River's Redis layer does)."""

    sends_now = True

    def __init__(self):
        super().__init__()
        self.fail = False

    def group_send_many_now(self, groups, message):
        if self.fail:
            raise ConnectionError("layer down")
        for group in groups:
            self.sent.append((group, message, threading.current_thread().name))
        return len(groups), 0


@pytest.fixture
def now_layer(monkeypatch):
    recording = SendsNowLayer()
    monkeypatch.setattr(events, "get_channel_layer", lambda: recording)
    monkeypatch.setattr(events, "_direct_paused_until", 0.0)
    return recording


def test_a_layer_that_sends_now_gets_the_batch_from_the_committing_thread(now_layer):
    for turn in range(1, 3):
        with transaction.atomic():
            events.events_publish(workspace_id=7, execution_id=42, events=[{"type": "turn_complete", "seq": turn}])
            assert now_layer.sent == [] if turn == 1 else len(now_layer.sent) == 2  # not before commit

    assert [(group, message["events"][0]["seq"], thread) for group, message, thread in now_layer.sent] == [
        ("execution.42", 1, "MainThread"), ("workspace.7", 1, "MainThread"),
        ("execution.42", 2, "MainThread"), ("workspace.7", 2, "MainThread")]


def test_a_batch_follows_the_runs_pieces_still_on_the_publisher(now_layer, monkeypatch):
    """A stored batch does not overtake the run's streamed pieces queued on the publisher."""
    import asyncio

    release = threading.Event()

    async def held(group, message):
        while not release.is_set():
            await asyncio.sleep(0.001)
        now_layer.sent.append((group, message, threading.current_thread().name))

    monkeypatch.setattr(now_layer, "group_send", held, raising=False)
    events.RunPartials.send(type("Sink", (), {"groups": ["execution.9"], "execution_id": 9})(),
                            {"type": "answer_delta", "index": 0})
    events.events_publish_committed(workspace_id=7, execution_id=9, events=[{"type": "turn_reasoning", "seq": 3}])
    events.events_publish_committed(workspace_id=7, execution_id=10, events=[{"type": "other_run", "seq": 1}])
    assert [m["events"][0]["type"] for _, m, _ in now_layer.sent] == ["other_run", "other_run"]  # not held
    release.set()
    assert events.events_flush()

    run_nine = [(m["events"][0]["type"], thread) for group, m, thread in now_layer.sent if group == "execution.9"]
    assert run_nine == [("answer_delta", "river-events"), ("turn_reasoning", "river-events")]


def test_a_failed_send_now_is_counted_and_later_batches_go_through_the_publisher(now_layer, caplog):
    from telemetry.faults import infra_fault_count

    before = infra_fault_count(component="channel_layer")
    now_layer.fail = True
    events.events_publish_committed(workspace_id=1, execution_id=3, events=[{"type": "first", "seq": 1}])
    now_layer.fail = False
    events.events_publish_committed(workspace_id=1, execution_id=3, events=[{"type": "second", "seq": 2}])
    assert events.events_flush()

    assert "could not publish first" in caplog.text
    assert infra_fault_count(component="channel_layer") == before + 1
    assert [(m["events"][0]["type"], thread) for _, m, thread in now_layer.sent] == [
        ("second", "river-events"), ("second", "river-events")]

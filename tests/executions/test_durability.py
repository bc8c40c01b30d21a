"""Durable runs: the lease, the watchdog, the intent/outcome journal and cancellation.

The model is an in-process ScriptedLLM (the HTTP path has its own tests); the
database is real PostgreSQL. Tests that touch the database from a second thread
(tool handlers run in the engine's tool pool) use ``transaction=True`` so the
other connection sees committed rows.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from executions import tasks
from executions.journal import DbJournal, step_row
from executions.models import Execution, ExecutionEvent, ExecutionStep
from executions.services import (
    execution_cancel,
    execution_claim,
    execution_run_segment,
    execution_start,
    executions_requeue_stale,
    person_run_request,
    state_load,
)
from rivercore.contracts import Step, StepStatus, StepType, Tokens
from rivercore.llm import LLMToolCall
from rivercore.runner import RunInterrupted
from tests.executions.durable_support import CALLS, HOOKS, TOOL_NAMES
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls or hooks."""


@pytest.fixture
def sent(monkeypatch):
    """Tasks the services queue, recorded instead of sent to the broker."""
    calls: list[tuple[str, tuple]] = []
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args, _name=task.name: calls.append((_name, args)))
    return calls


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, tools=list(TOOL_NAMES), action_level="automated")


def _step_numbers(execution_id: int) -> list[int]:
    return list(ExecutionStep.objects.filter(execution_id=execution_id).order_by("step_number")
                .values_list("step_number", flat=True))


def _tool_messages(llm: ScriptedLLM, request_index: int) -> list[str]:
    return [m.get("content") or "" for m in llm.requests[request_index]["messages"] if m.get("role") == "tool"]


# --- the lease ------------------------------------------------------------------------


def test_duplicate_delivery_claims_once(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))

    first = execution_claim(execution_id=execution.pk)
    second = execution_claim(execution_id=execution.pk)

    assert first is not None
    assert second is None
    execution.refresh_from_db()
    assert execution.status == Execution.Status.RUNNING
    assert execution.lease_token == first
    assert execution.attempts == 1


def test_duplicate_delivery_of_a_running_segment_returns_without_running(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    assert execution_claim(execution_id=execution.pk) is not None
    llm = ScriptedLLM([text_reply("should never be asked")])

    assert execution_run_segment(execution_id=execution.pk, llm=llm) is None

    assert llm.requests == []
    assert _step_numbers(execution.pk) == []


def test_expired_lease_lets_another_claim_take_over_and_fences_the_old_holder(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    old_token = execution_claim(execution_id=execution.pk)
    assert execution_claim(execution_id=execution.pk) is None  # still leased

    Execution.objects.filter(pk=execution.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    new_token = execution_claim(execution_id=execution.pk)

    assert new_token is not None and new_token != old_token
    execution.refresh_from_db()
    assert execution.lease_token == new_token
    assert execution.attempts == 2
    # The old holder's next flush is refused and writes nothing.
    stale = DbJournal(execution, old_token)
    state = state_load(execution)
    stale.record(state, Step(step_number=1, step_type=StepType.REASONING, turn=1))
    with pytest.raises(RunInterrupted):
        stale.flush(state)
    assert _step_numbers(execution.pk) == []


@pytest.mark.django_db(transaction=True)
def test_second_worker_returns_while_the_first_holds_the_run(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    inside, release = threading.Event(), threading.Event()

    def hold(ctx, args):
        inside.set()
        release.wait(30)

    HOOKS["durable_slow_read"] = hold
    results: dict[str, str | None] = {}

    def worker(name: str, llm: ScriptedLLM) -> None:
        try:
            results[name] = execution_run_segment(execution_id=execution.pk, llm=llm)
        finally:
            connection.close()

    script = [tool_reply("durable_slow_read", {"marker": "r1"}, call_id="call_r1"), text_reply("done")]
    first_llm, second_llm = ScriptedLLM(list(script)), ScriptedLLM(list(script))
    first = threading.Thread(target=worker, args=("first", first_llm))
    first.start()
    assert inside.wait(30), "the first worker never reached the tool"
    second = threading.Thread(target=worker, args=("second", second_llm))
    second.start()
    second.join(30)
    release.set()
    first.join(30)

    assert results == {"first": "success", "second": None}
    assert second_llm.requests == []
    assert CALLS == [("durable_slow_read", "r1")]
    numbers = _step_numbers(execution.pk)
    assert numbers == list(range(1, len(numbers) + 1))
    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED
    assert execution.attempts == 1
    assert ExecutionEvent.objects.filter(execution=execution, event_type="run_completed").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_workers_started_together_run_the_execution_once(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    start = threading.Barrier(2)
    results: list[str | None] = []
    script = [
        tool_reply("durable_slow_read", {"marker": "r1"}, call_id="call_r1"),
        tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1"),
        text_reply("done"),
    ]
    models = [ScriptedLLM(list(script)), ScriptedLLM(list(script))]

    def worker(llm: ScriptedLLM) -> None:
        try:
            start.wait(10)
            results.append(execution_run_segment(execution_id=execution.pk, llm=llm))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(m,)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(results, key=str) == [None, "success"]
    assert sorted(len(m.requests) for m in models) == [0, 3]
    assert CALLS == [("durable_slow_read", "r1"), ("durable_write", "w1")]
    numbers = _step_numbers(execution.pk)
    assert numbers == list(range(1, len(numbers) + 1))
    assert ExecutionStep.objects.filter(execution=execution, step_type="observation").count() == 2
    assert ExecutionEvent.objects.filter(execution=execution, event_type="run_completed").count() == 1
    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED
    assert execution.attempts == 1


@pytest.mark.django_db(transaction=True)
def test_worker_that_lost_its_lease_stops_without_writing(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    committed_before_steal: list[int] = []

    def steal(ctx, args):
        if args.marker == "r2":
            committed_before_steal.append(ExecutionStep.objects.filter(execution_id=ctx.execution_id).count())
            Execution.objects.filter(pk=ctx.execution_id).update(lease_token="another-worker")

    HOOKS["durable_slow_read"] = steal
    llm = ScriptedLLM([
        tool_reply("durable_slow_read", {"marker": "r1"}, call_id="call_r1"),
        tool_reply("durable_slow_read", {"marker": "r2"}, call_id="call_r2"),
        tool_reply("durable_slow_read", {"marker": "r3"}, call_id="call_r3"),
        text_reply("done"),
    ])

    assert execution_run_segment(execution_id=execution.pk, llm=llm) is None

    assert len(llm.requests) == 2  # stopped at the flush after turn 2; never asked for turn 3
    assert CALLS == [("durable_slow_read", "r1"), ("durable_slow_read", "r2")]
    assert committed_before_steal and committed_before_steal[0] > 0
    assert _step_numbers(execution.pk) == list(range(1, committed_before_steal[0] + 1))
    assert set(ExecutionStep.objects.filter(execution=execution).values_list("turn", flat=True)) == {1}
    execution.refresh_from_db()
    assert execution.lease_token == "another-worker"
    assert execution.status == Execution.Status.RUNNING  # the new holder decides how it ends


class _StealingLLM(ScriptedLLM):
    """Loses the lease while the model "thinks", before a write call is dispatched."""

    def __init__(self, replies, *, execution_id: int, on_request: int):
        super().__init__(replies)
        self.execution_id = execution_id
        self.on_request = on_request

    def complete(self, **kwargs):
        reply = super().complete(**kwargs)
        if len(self.requests) == self.on_request:
            Execution.objects.filter(pk=self.execution_id).update(lease_token="another-worker")
        return reply


def test_lost_lease_blocks_a_write_before_dispatch(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    llm = _StealingLLM(
        [tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1"), text_reply("done")],
        execution_id=execution.pk, on_request=1,
    )

    assert execution_run_segment(execution_id=execution.pk, llm=llm) is None

    assert CALLS == []  # the intent could not be committed, so the call never left
    assert _step_numbers(execution.pk) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("write_behind", [True, False], ids=["write_behind", "wait"])
def test_lease_lost_in_an_ungoverned_turn_stops_the_run_before_any_write(agent, owner, sent, settings, write_behind):
    """A reasoning tool's turn is journaled write-behind: the refusal of its write is
    known at the next flush at the latest, and a write tool's intent always waits for
    it, so the write is never dispatched. Without write-behind the run stops at once."""
    settings.RIVER_JOURNAL_WRITE_BEHIND = write_behind
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))

    def steal(ctx, args):
        Execution.objects.filter(pk=ctx.execution_id).update(lease_token="another-worker")

    HOOKS["durable_note"] = steal
    llm = ScriptedLLM([
        tool_reply("durable_note", {"marker": "n1"}, call_id="call_n1"),
        tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1"),
        text_reply("done"),
    ])

    assert execution_run_segment(execution_id=execution.pk, llm=llm) is None

    assert CALLS == [("durable_note", "n1")]
    behind = write_behind and connection.vendor == "postgresql"  # the embedded stack always waits
    assert len(llm.requests) == (2 if behind else 1)  # at most one model call after the loss
    assert not ExecutionStep.objects.filter(execution=execution, turn__gte=1).exists()
    execution.refresh_from_db()
    assert execution.lease_token == "another-worker" and execution.status == Execution.Status.RUNNING


@pytest.mark.django_db(transaction=True)
def test_a_turns_events_are_live_while_the_model_thinks_about_the_next(agent, owner, sent, settings, monkeypatch):
    """With write-behind the journal reads a commit's result when it next flushes;
    a turn's events must not wait for that when the next model call is slow."""
    from telemetry import events as telemetry_events

    settings.RIVER_JOURNAL_WRITE_BEHIND = True
    observed = threading.Event()
    real_submit = telemetry_events._publisher.submit

    def submit(groups, events, key=None):
        if any(e["type"] == "observation_received" and e.get("turn") == 1 for e in events):
            observed.set()
        real_submit(groups, events, key=key)

    # Every committed batch through the publisher, where it is recorded (no direct send).

    monkeypatch.setattr(telemetry_events, "_direct_paused_until", float("inf"))

    monkeypatch.setattr(telemetry_events._publisher, "submit", submit)
    seen_while_thinking: list[bool] = []

    class SlowSecondTurn(ScriptedLLM):
        def complete(self, **kwargs):
            if len(self.requests) == 1:  # the model "thinks" until turn 1's events are out (bounded)
                seen_while_thinking.append(observed.wait(10))
            return super().complete(**kwargs)

    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    llm = SlowSecondTurn([tool_reply("durable_note", {"marker": "n1"}, call_id="call_n1"), text_reply("done")])

    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    assert seen_while_thinking == [True]


# --- the watchdog ---------------------------------------------------------------------


def test_watchdog_requeues_expired_leases_and_lost_queue_messages(agent, owner, sent):
    now = timezone.now()

    def run(**fields) -> int:
        execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
        Execution.objects.filter(pk=execution.pk).update(**fields)
        return execution.pk

    worker_died = run(status=Execution.Status.RUNNING, lease_token="dead", lease_expires_at=now - timedelta(seconds=5),
                      published_at=None)  # the claim consumed the message
    still_leased = run(status=Execution.Status.RUNNING, lease_token="alive",
                       lease_expires_at=now + timedelta(seconds=30), published_at=None)
    message_lost = run(status=Execution.Status.QUEUED, published_at=now - timedelta(seconds=600))
    never_sent = run(status=Execution.Status.QUEUED, published_at=None)
    just_queued = run(status=Execution.Status.QUEUED, published_at=now - timedelta(seconds=5))
    finished = run(status=Execution.Status.COMPLETED, lease_expires_at=now - timedelta(seconds=600),
                   published_at=now - timedelta(seconds=600))
    paused = run(status=Execution.Status.AWAITING_APPROVAL, published_at=now - timedelta(seconds=600))
    sent.clear()

    requeued = executions_requeue_stale(grace_seconds=120)

    assert sorted(requeued) == sorted([worker_died, message_lost, never_sent])
    assert sorted(args[0] for name, args in sent if name == "executions.run_segment") == sorted(requeued)
    assert not {still_leased, just_queued, finished, paused} & set(requeued)
    # Sent once: a second pass within the grace leaves them to the message just sent.
    sent.clear()
    assert executions_requeue_stale(grace_seconds=120) == []
    assert sent == []


def test_requeued_run_continues_from_its_last_committed_turn(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    first = ScriptedLLM([tool_reply("durable_slow_read", {"marker": "r1"}, call_id="call_r1")])

    class WorkerDied(BaseException):
        pass

    def die_on_second_turn(**kwargs):
        if first.requests:
            raise WorkerDied
        return ScriptedLLM.complete(first, **kwargs)

    first.complete = die_on_second_turn
    with pytest.raises(WorkerDied):
        execution_run_segment(execution_id=execution.pk, llm=first)
    committed = _step_numbers(execution.pk)
    assert committed  # turn 1 was committed before the "crash"

    Execution.objects.filter(pk=execution.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert executions_requeue_stale() == [execution.pk]
    second = ScriptedLLM([text_reply("done")])
    assert execution_run_segment(execution_id=execution.pk, llm=second) == "success"

    assert CALLS == [("durable_slow_read", "r1")]  # the committed read is not repeated
    assert any("'durable_slow_read' returned" in m for m in _tool_messages(second, 0))
    numbers = _step_numbers(execution.pk)
    assert numbers[: len(committed)] == committed
    assert numbers == list(range(1, len(numbers) + 1))
    # The event feed is numbered without gaps or repeats across both segments, up to run_completed.
    feed = list(ExecutionEvent.objects.filter(execution=execution).order_by("seq").values_list("seq", "event_type"))
    assert [seq for seq, _ in feed] == list(range(1, len(feed) + 1))
    assert feed[0][1] == "run_started" and feed[-1][1] == "run_completed"


# --- intent and outcome of write tools --------------------------------------------------


def _intent_without_outcome(execution: Execution, tool_name: str, marker: str, call_id: str) -> None:
    """The rows a worker leaves when it dies after committing a write call's intent."""
    arguments = {"marker": marker}
    reasoning = Step(
        step_number=1, step_type=StepType.REASONING, turn=1, model_used="scripted", model_tier="fast",
        provider="test", tokens=Tokens(input=10, output=5),
        output={"content": None, "cost_usd": 0.0,
                "tool_calls": [LLMToolCall(id=call_id, name=tool_name, arguments=arguments).model_dump()]},
        messages=[{"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": tool_name, "arguments": json.dumps(arguments)}}
        ]}],
    )
    intent = Step(step_number=2, step_type=StepType.TOOL_CALL, turn=1, tool_name=tool_name,
                  tool_category="execution", call_id=call_id, input=arguments, status=StepStatus.PENDING)
    ExecutionStep.objects.bulk_create([step_row(execution.pk, s) for s in (reasoning, intent)])
    Execution.objects.filter(pk=execution.pk).update(
        status=Execution.Status.RUNNING, lease_token="dead-worker", attempts=1,
        lease_expires_at=timezone.now() - timedelta(seconds=1), started_at=timezone.now(),
    )


def test_write_intent_without_outcome_is_reported_unknown_not_repeated(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    _intent_without_outcome(execution, "durable_write", "w1", "call_w1")
    llm = ScriptedLLM([text_reply("I will check before writing again.")])

    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    assert CALLS == []  # the handler was not called again
    seen = _tool_messages(llm, 0)
    assert len(seen) == 1 and "outcome of durable_write is unknown" in seen[0]
    observation = ExecutionStep.objects.get(execution=execution, call_id="call_w1", step_type="observation")
    assert observation.status == "failed"
    assert observation.output["error"]["code"] == "OUTCOME_UNKNOWN"
    assert _step_numbers(execution.pk) == list(range(1, len(_step_numbers(execution.pk)) + 1))


def test_idempotent_write_intent_without_outcome_is_retried(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    _intent_without_outcome(execution, "durable_idempotent_write", "w1", "call_w1")
    llm = ScriptedLLM([text_reply("done")])

    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    assert CALLS == [("durable_idempotent_write", "w1")]
    seen = _tool_messages(llm, 0)
    assert len(seen) == 1 and "'durable_idempotent_write' returned" in seen[0]
    observation = ExecutionStep.objects.get(execution=execution, call_id="call_w1", step_type="observation")
    assert observation.status == "completed"
    assert observation.output["result"] == {"tool": "durable_idempotent_write", "marker": "w1"}


def test_crash_inside_a_write_call_is_not_repeated_on_resume(agent, owner, sent):
    """The same boundary reached by the engine itself: the worker dies inside the handler."""
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))

    class WorkerDied(BaseException):
        pass

    def die(ctx, args):
        raise WorkerDied

    HOOKS["durable_write"] = die
    first = ScriptedLLM([tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1")])
    with pytest.raises(WorkerDied):
        execution_run_segment(execution_id=execution.pk, llm=first)
    intent = ExecutionStep.objects.get(execution=execution, call_id="call_w1", step_type="tool_call")
    assert intent.status == "pending"
    assert not ExecutionStep.objects.filter(execution=execution, step_type="observation").exists()

    HOOKS.clear()
    second = ScriptedLLM([text_reply("done")])
    assert execution_run_segment(execution_id=execution.pk, llm=second) is None  # lease still held by the dead one
    Execution.objects.filter(pk=execution.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert execution_run_segment(execution_id=execution.pk, llm=second) == "success"

    assert CALLS == []  # died before its marker; and never dispatched again
    assert any("outcome of durable_write is unknown" in m for m in _tool_messages(second, 0))
    assert ExecutionStep.objects.filter(execution=execution, step_type="tool_call", call_id="call_w1").count() == 1


# --- cancellation -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_cancel_during_a_segment_stops_it_at_the_next_flush(agent, owner, sent):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    committed_at_cancel: list[int] = []

    def cancel(ctx, args):
        if args.marker == "r2":
            committed_at_cancel.append(ExecutionStep.objects.filter(execution_id=ctx.execution_id).count())
            execution_cancel(execution=Execution.objects.get(pk=ctx.execution_id), user=owner)

    HOOKS["durable_slow_read"] = cancel
    llm = ScriptedLLM([
        tool_reply("durable_slow_read", {"marker": "r1"}, call_id="call_r1"),
        tool_reply("durable_slow_read", {"marker": "r2"}, call_id="call_r2"),
        tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1"),
        text_reply("done"),
    ])

    assert execution_run_segment(execution_id=execution.pk, llm=llm) is None

    assert len(llm.requests) == 2
    assert ("durable_write", "w1") not in CALLS
    execution.refresh_from_db()
    assert execution.status == Execution.Status.CANCELLED
    assert execution.error["code"] == "CANCELLED"
    assert _step_numbers(execution.pk) == list(range(1, committed_at_cancel[0] + 1))
    completed = ExecutionEvent.objects.filter(execution=execution, event_type="run_completed")
    assert [e.payload["status"] for e in completed] == ["cancelled"]



def test_a_crashing_segment_ends_the_run_failed_instead_of_leaving_it_running(workspace, owner):
    from executions.services import execution_run_segment, execution_start, person_run_request
    from tests.factories import make_agent

    class Broken:
        def complete(self, **kwargs):
            raise KeyError("bug in a model adapter")

    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="x"))
    assert execution_run_segment(execution_id=execution.pk, llm=Broken()) == "failed"
    execution.refresh_from_db()
    assert execution.status == "failed" and execution.lease_token == ""
    assert execution.error["message"] == "internal error: KeyError"


def test_a_run_that_keeps_losing_its_workers_is_given_up(workspace, owner, settings):
    from executions.models import Execution
    from executions.services import execution_run_segment, execution_start, person_run_request
    from tests.factories import ScriptedLLM, make_agent

    settings.RIVER_MAX_SEGMENT_ATTEMPTS = 3
    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="x"))
    Execution.objects.filter(pk=execution.pk).update(attempts=3)
    llm = ScriptedLLM([])
    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "failed"
    execution.refresh_from_db()
    assert execution.status == "failed" and "gave up after 3 segment attempts" in execution.error["message"]
    assert llm.requests == []

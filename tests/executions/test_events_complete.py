"""Every event carries all its payload fields in every path, asserted from real runs:
an approval that expires or is closed by a cancel still gets its ``approval_resolved``
(before the run's ``run_completed``, which carries duration and turns in every ending:
expiry, cancel, crash and the watchdog giving up, each driven through its real path);
an answered question closes the interaction pair with ``interaction_resolved``."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from executions import services, tasks
from executions.models import Execution, ExecutionEvent, ExecutionSegment
from executions.services.finish import gave_up_message, run_end_failed
from governance.models import ApprovalRequest
from governance.resolution import approvals_expire_due
from rivercore.events import RunEventType
from tests.executions import engine_support  # noqa: F401 - registers the test tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

RUN_COMPLETED = {"status", "outcome", "duration_ms", "turns_used", "final_output_summary"}
APPROVAL_RESOLVED = {"approval_id", "resolution", "resolved_by"}


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls or hooks."""


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def _stored(execution_id: int) -> list[tuple[str, dict]]:
    return [(row.event_type, row.payload) for row in ExecutionEvent.objects.filter(execution_id=execution_id)
            .order_by("seq")]


def _paused_for_approval(workspace, owner) -> tuple[Execution, ApprovalRequest]:
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"],
                       action_level="act_with_approval", require_approval_for=["durable_write"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write w1"))
    llm = ScriptedLLM([tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    return execution, ApprovalRequest.objects.get(execution_id=execution.pk)


def _assert_ending(stored, *, status: str, turns: int) -> dict:
    kind, completed = stored[-1]
    assert kind == RunEventType.RUN_COMPLETED and set(completed) == RUN_COMPLETED
    assert completed["status"] == status and completed["turns_used"] == turns
    assert isinstance(completed["duration_ms"], int) and completed["duration_ms"] >= 0
    return completed


@pytest.mark.django_db
def test_an_expired_approval_is_resolved_expired_before_the_run_completes(workspace, owner, sent):
    execution, approval = _paused_for_approval(workspace, owner)
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - dt.timedelta(minutes=1))

    assert approvals_expire_due() == 1

    stored = _stored(execution.pk)
    kind, resolved = stored[-2]
    assert kind == RunEventType.APPROVAL_RESOLVED and set(resolved) == APPROVAL_RESOLVED
    assert resolved == {"approval_id": str(approval.pk), "resolution": "expired", "resolved_by": None}
    _assert_ending(stored, status="approval_expired", turns=1)
    assert [k for k, _ in stored].count(RunEventType.RUN_COMPLETED) == 1


@pytest.mark.django_db
def test_a_cancel_resolves_the_open_approval_cancelled(workspace, owner, sent):
    execution, approval = _paused_for_approval(workspace, owner)

    services.execution_cancel(execution=execution, user=owner)

    stored = _stored(execution.pk)
    assert stored[-2] == (RunEventType.APPROVAL_RESOLVED,
                          {"approval_id": str(approval.pk), "resolution": "cancelled", "resolved_by": None})
    _assert_ending(stored, status="cancelled", turns=1)


@pytest.mark.django_db
def test_a_crashed_or_given_up_run_completes_with_duration_and_turns(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["test_echo", "ask_user"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="ask"))
    question = {"interaction_type": "clarification_request", "message": "Which?", "options": ["A", "B"]}
    llm = ScriptedLLM([tool_reply("test_echo", {"text": "x"}), tool_reply("ask_user", question, "q1")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_interaction"
    Execution.objects.filter(pk=execution.pk).update(started_at=timezone.now() - dt.timedelta(seconds=3))
    # The run's time is its segments' (waits excluded): its one segment ran those 3 seconds.
    ExecutionSegment.objects.filter(execution_id=execution.pk).update(
        started_at=F("started_at") - dt.timedelta(seconds=3))

    with transaction.atomic():
        row = Execution.objects.select_for_update().get(pk=execution.pk)
        run_end_failed(row, code="WORKER_LOST", message=gave_up_message(20, "broker down"))

    completed = _assert_ending(_stored(execution.pk), status="failed", turns=2)
    assert completed["duration_ms"] >= 3000 and "gave up after 20" in completed["final_output_summary"]


@pytest.mark.django_db
def test_an_answered_question_closes_the_interaction_pair(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["ask_user"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="ask"))
    question = {"interaction_type": "clarification_request", "message": "Which?", "options": ["A", "B"]}
    assert services.execution_run_segment(
        execution_id=execution.pk, llm=ScriptedLLM([tool_reply("ask_user", question, "q1")])) == "awaiting_interaction"

    services.execution_respond(execution=execution, user=owner, user_response="B")
    assert services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("B it is")])) \
        == "success"

    stored = _stored(execution.pk)
    kinds = [k for k, _ in stored]
    required = kinds.index(RunEventType.INTERACTION_REQUIRED)
    resolved = kinds.index(RunEventType.INTERACTION_RESOLVED)
    assert required < resolved < kinds.index(RunEventType.RUN_COMPLETED)
    assert stored[required][1]["message"] == "Which?" and stored[required][1]["turn"] == 1
    assert stored[resolved][1] == {"turn": 1, "call_id": "q1", "resolution": "answered", "answered_by": owner.pk}
    turn_completes = [p for k, p in stored if k == RunEventType.TURN_COMPLETE]
    assert turn_completes and all(set(p) == {"turn", "duration_ms"} and isinstance(p["duration_ms"], int)
                                  for p in turn_completes)
    _assert_ending(stored, status="completed", turns=2)


class _WorkerKilled(BaseException):
    """Stands for the process dying mid-run: nothing in the segment catches it, so the
    run is left running under a lease nobody renews."""


@pytest.mark.django_db
def test_a_run_the_watchdog_gives_up_on_completes_with_duration_and_turns(workspace, owner, sent, settings,
                                                                           monkeypatch):
    from executions.services import segment
    from executions.services.watchdog import executions_requeue_stale

    agent = make_agent(workspace=workspace, owner=owner, tools=["test_echo"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="echo, then die"))
    llm = ScriptedLLM([tool_reply("test_echo", {"text": "x"}), text_reply("done")])

    def killed(**kwargs):  # the worker dies after the last turn committed, before the run's end is written
        raise _WorkerKilled

    with monkeypatch.context() as patched:
        patched.setattr(segment, "execution_segment_end", killed)
        with pytest.raises(_WorkerKilled):
            services.execution_run_segment(execution_id=execution.pk, llm=llm)
    row = Execution.objects.get(pk=execution.pk)
    assert row.status == Execution.Status.RUNNING and row.turn_count == 2 and row.lease_token
    # Its lease ran out, and every attempt the watchdog allows has been used.
    Execution.objects.filter(pk=execution.pk).update(
        lease_expires_at=timezone.now() - dt.timedelta(seconds=1), attempts=settings.RIVER_MAX_SEGMENT_ATTEMPTS,
        started_at=timezone.now() - dt.timedelta(seconds=2))
    # Its open segment began 3 seconds ago; the watchdog ends it where the lease ran out.
    ExecutionSegment.objects.filter(execution_id=execution.pk).update(
        started_at=F("started_at") - dt.timedelta(seconds=3))

    assert executions_requeue_stale(grace_seconds=0) == []

    completed = _assert_ending(_stored(execution.pk), status="failed", turns=2)
    assert completed["duration_ms"] >= 2000 and "gave up after" in completed["final_output_summary"]


@pytest.mark.django_db
def test_a_segment_that_crashes_completes_the_run_with_duration_and_turns(workspace, owner, sent, monkeypatch):
    from executions.services import segment

    agent = make_agent(workspace=workspace, owner=owner, tools=["test_echo"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="echo, then crash"))
    llm = ScriptedLLM([tool_reply("test_echo", {"text": "x"}), text_reply("done")])

    def broken_end(**kwargs):  # a bug after the last turn committed: the segment must still end the run
        raise RuntimeError("bug")

    monkeypatch.setattr(segment, "execution_segment_end", broken_end)
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "failed"

    completed = _assert_ending(_stored(execution.pk), status="failed", turns=2)
    assert completed["final_output_summary"] == "internal error: RuntimeError"
    assert Execution.objects.get(pk=execution.pk).error["code"] == "AGENT_ERROR"

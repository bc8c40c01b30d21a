"""A run's time: each segment's start and end are recorded (the claim opens one, its
pause or the run's end closes it), waits for approval, a person or a delegated run are
shown as such, and every run time figure (API, run page, runs list, overview, the
``run_completed`` event) counts the segments only.

Waits are made long by moving the recorded times back, never by sleeping."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from unittest import mock

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from executions import services, tasks
from executions.models import Execution, ExecutionEvent, ExecutionSegment
from executions.selectors import execution_run_time, executions_average_active_ms
from executions.services.claim import execution_claim_load
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from tenancy.models import Membership
from tenancy.permissions import Role
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from web.overview import overview_for_workspace

pytestmark = pytest.mark.django_db

QUESTION = {"interaction_type": "clarification_request", "message": "Which one?"}
HOURS = dt.timedelta(hours=3)
# Generous bound on what a scripted run's segments take on a loaded machine.
QUICK_MS = 60_000


@pytest.fixture(autouse=True)
def _no_queue():
    with mock.patch.object(tasks.run_segment, "delay"), mock.patch.object(tasks.post_process, "delay"):
        yield


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """The durable test tools' records start and end empty."""


@pytest.fixture
def approver(workspace, django_user_model):
    user = django_user_model.objects.create_user(username="approver", password="pw-approver", first_name="Ada",
                                                 last_name="Approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


def _start(agent, owner, prompt="go") -> Execution:
    return services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt=prompt))


def _age(execution_id: int, by: dt.timedelta) -> None:
    """Move everything the run recorded so far back by ``by``: its wait then lasts that long."""
    Execution.objects.filter(pk=execution_id).update(queued_at=models_minus("queued_at", by),
                                                     started_at=models_minus("started_at", by))
    ExecutionSegment.objects.filter(execution_id=execution_id).update(
        started_at=models_minus("started_at", by), ended_at=models_minus("ended_at", by))
    ExecutionEvent.objects.filter(execution_id=execution_id).update(created_at=models_minus("created_at", by))
    ApprovalRequest.objects.filter(execution_id=execution_id).update(created_at=models_minus("created_at", by))


def models_minus(field: str, by: dt.timedelta):
    from django.db.models import F

    return F(field) - by


def _approval_run(workspace, owner, approver) -> Execution:
    """A run that pauses for approval, waits three hours, is approved and finishes (its
    one-minute timeout counts its segments only, docs/engine.md)."""
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"], action_level="act_with_approval",
                       require_approval_for=["durable_write"], model_config={"run_timeout_seconds": 60})
    execution = _start(agent, owner)
    llm = ScriptedLLM([tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1"), text_reply("wrote w1")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    _age(execution.pk, HOURS)
    approval_resolve(user=approver, approval_id=ApprovalRequest.objects.get(execution_id=execution.pk).pk,
                     status="approved")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    return Execution.objects.get(pk=execution.pk)


def test_each_segment_is_recorded_from_its_claim_to_its_pause_or_the_runs_end(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=["ask_user"])
    execution = _start(agent, owner)
    llm = ScriptedLLM([tool_reply("ask_user", QUESTION, "q1"), text_reply("done")])
    assert not ExecutionSegment.objects.filter(execution_id=execution.pk).exists()  # queued: nothing ran yet

    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_interaction"
    first = ExecutionSegment.objects.get(execution_id=execution.pk)
    assert first.number == 1 and first.ended_as == "awaiting_interaction"
    assert first.started_at == Execution.objects.get(pk=execution.pk).started_at <= first.ended_at

    services.execution_respond(execution=execution, user=owner, user_response="that one")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    ended = Execution.objects.get(pk=execution.pk)
    segments = list(ExecutionSegment.objects.filter(execution_id=execution.pk).order_by("number"))
    assert [(s.number, s.ended_as) for s in segments] == [(1, "awaiting_interaction"), (2, "ended")]
    assert segments[0].ended_at == first.ended_at  # written once, never moved
    assert segments[0].ended_at < segments[1].started_at and segments[1].ended_at == ended.finished_at
    assert ended.started_at == segments[0].started_at  # started_at stays the first start


def test_a_three_hour_approval_wait_is_shown_as_such_and_counted_nowhere(workspace, owner, approver,
                                                                         api_client_for):
    run = _approval_run(workspace, owner, approver)

    times = execution_run_time(execution=run)
    assert times.recorded and len(times.segments) == 2
    assert times.active_ms < QUICK_MS
    approval = [wait for wait in times.waits if wait.wait_kind == "approval"]
    assert len(approval) == 1 and approval[0].duration_ms >= HOURS.total_seconds() * 1000
    assert (approval[0].decided_by, approval[0].resolution) == ("Ada Approver", "approved")
    # Active and waiting add up to the whole life of the run, queued to finished.
    whole = int((run.finished_at - run.queued_at).total_seconds() * 1000)
    # each segment and wait is whole milliseconds (truncated), so the parts may lose up to
    # one millisecond each against the whole span
    parts = len(times.segments) + len(times.waits)
    assert abs(times.active_ms + times.waited_ms - whole) <= parts + 1
    assert [entry.kind for entry in times.timeline if entry.kind == "segment" or entry.wait_kind == "approval"] == [
        "segment", "wait", "segment"]

    completed = ExecutionEvent.objects.get(execution_id=run.pk, event_type="run_completed")
    assert completed.payload["duration_ms"] < QUICK_MS
    assert abs(completed.payload["duration_ms"] - times.active_ms) <= 2
    assert run.usage["execution_duration_ms"] == completed.payload["duration_ms"]

    body = api_client_for(owner).get(f"/api/v1/executions/{run.pk}/").json()
    assert body["active_ms"] == times.active_ms and body["waited_ms"] >= HOURS.total_seconds() * 1000
    assert [s["ended_as"] for s in body["segments"]] == ["awaiting_approval", "ended"]
    api_wait = next(wait for wait in body["waits"] if wait["kind"] == "approval")
    assert api_wait["decided_by"] == "Ada Approver" and api_wait["resolution"] == "approved"
    assert api_wait["duration_ms"] == approval[0].duration_ms

    client = Client()
    client.force_login(owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Waited 3 h 0 min for approval" in page and "approved by Ada Approver" in page
    assert "Run time</dt><dd>3 h" not in page


def test_the_run_time_api_is_scoped_to_the_workspace(workspace, owner, approver, outsider, api_client_for):
    run = _approval_run(workspace, owner, approver)
    response = api_client_for(outsider).get(f"/api/v1/executions/{run.pk}/")
    assert response.status_code == 404 and "segments" not in response.json()


def test_a_segment_whose_worker_died_ends_where_its_lease_ran_out(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    execution = _start(agent, owner)
    claimed = execution_claim_load(execution_id=execution.pk)
    assert claimed is not None
    now = timezone.now()
    lease_ran_out = now - dt.timedelta(minutes=9)
    Execution.objects.filter(pk=execution.pk).update(lease_expires_at=lease_ran_out)
    ExecutionSegment.objects.filter(execution_id=execution.pk).update(started_at=now - dt.timedelta(minutes=10))

    again = execution_claim_load(execution_id=execution.pk)

    assert again is not None
    lost, current = ExecutionSegment.objects.filter(execution_id=execution.pk).order_by("number")
    assert (lost.ended_as, lost.ended_at) == ("interrupted", lease_ran_out)
    assert current.number == 2 and current.ended_at is None
    assert again[1].active_before_ms == 60_000  # what the claim hands the segment's end
    times = execution_run_time(execution=Execution.objects.get(pk=execution.pk))
    retry = [wait for wait in times.waits if wait.wait_kind == "retry"]
    assert len(retry) == 1 and retry[0].duration_ms >= 9 * 60_000


def test_a_run_cancelled_while_it_waits_ends_its_wait_at_the_cancel(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=["ask_user"])
    execution = _start(agent, owner)
    llm = ScriptedLLM([tool_reply("ask_user", QUESTION, "q1")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_interaction"
    _age(execution.pk, HOURS)

    services.execution_cancel(execution=execution, user=owner)

    run = Execution.objects.get(pk=execution.pk)
    times = execution_run_time(execution=run)
    person = [wait for wait in times.waits if wait.wait_kind == "person"]
    assert len(person) == 1 and person[0].ended_at == run.finished_at
    assert person[0].duration_ms >= HOURS.total_seconds() * 1000 and times.active_ms < QUICK_MS
    assert ExecutionSegment.objects.get(execution_id=run.pk).ended_as == "awaiting_interaction"
    completed = ExecutionEvent.objects.get(execution_id=run.pk, event_type="run_completed")
    assert completed.payload["duration_ms"] < QUICK_MS


def _finished_run(agent, *, queued: dt.datetime, spans: list[tuple[int, int]]) -> Execution:
    """A finished run queued at ``queued`` whose segments ran ``spans`` (seconds after
    queued, start and end); it finished at the last segment's end."""
    run = Execution.objects.create(
        workspace=agent.workspace, agent=agent, agent_version=agent.current_version,
        status=Execution.Status.COMPLETED, queued_at=queued, cost_usd=Decimal(0),
        started_at=queued + dt.timedelta(seconds=spans[0][0]), finished_at=queued + dt.timedelta(seconds=spans[-1][1]))
    ExecutionSegment.objects.bulk_create([
        ExecutionSegment(execution=run, number=n, started_at=queued + dt.timedelta(seconds=start),
                         ended_at=queued + dt.timedelta(seconds=end),
                         ended_as="ended" if n == len(spans) else "awaiting_approval")
        for n, (start, end) in enumerate(spans, start=1)])
    return run


def test_the_runs_list_and_the_overview_average_count_segments_only(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    now = timezone.now()
    # 10 s, then five hours waiting for approval, then 20 s: 30 s of run time.
    waited = _finished_run(agent, queued=now - dt.timedelta(hours=6), spans=[(0, 10), (5 * 3600, 5 * 3600 + 20)])
    _finished_run(agent, queued=now - dt.timedelta(hours=1), spans=[(1, 51)])  # 50 s
    Execution.objects.create(workspace=workspace, agent=agent, agent_version=agent.current_version,
                             status=Execution.Status.QUEUED, queued_at=now)  # not finished: not averaged

    assert executions_average_active_ms(runs=Execution.objects.filter(workspace=workspace)) == 40_000
    assert overview_for_workspace(workspace=workspace).average_run_ms_week == 40_000
    assert execution_run_time(execution=waited).active_ms == 30_000

    client = Client()
    client.force_login(owner)
    listing = client.get("/runs/").content.decode()
    assert "30.0 s" in listing and "50.0 s" in listing and "5 h" not in listing
    overview = client.get("/").content.decode()
    assert "Average run time" in overview and "40.0 s" in overview


def test_a_run_from_before_segments_counts_from_its_first_start(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    queued = timezone.now() - dt.timedelta(minutes=5)
    run = Execution.objects.create(workspace=workspace, agent=agent, agent_version=agent.current_version,
                                   status=Execution.Status.COMPLETED, queued_at=queued,
                                   started_at=queued + dt.timedelta(seconds=30),
                                   finished_at=queued + dt.timedelta(seconds=90))
    times = execution_run_time(execution=run)
    assert not times.recorded and times.active_ms == 60_000
    assert [(w.wait_kind, w.duration_ms) for w in times.waits] == [("queued", 30_000)]
    assert executions_average_active_ms(runs=Execution.objects.filter(pk=run.pk)) is None


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-statement claim is PostgreSQL's")
def test_opening_a_segment_costs_the_claim_no_statement(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    execution = _start(agent, owner)
    statements: list[str] = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert execution_claim_load(execution_id=execution.pk) is not None
    assert len(statements) == 1
    assert ExecutionSegment.objects.filter(execution_id=execution.pk, number=1, ended_at__isnull=True).exists()

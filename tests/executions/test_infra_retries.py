"""A segment that hits an infrastructure error is retried a bounded number of times.

The database error is raised where it would surface in a worker: from the model
port (the run's turn) or from the governance counter store. Neither ends the run
on the spot, neither lets a write through, and neither can retry forever.
"""

from __future__ import annotations

import time
from unittest import mock

import pytest
from django.db import OperationalError

from executions import services, tasks
from executions.models import Execution, ExecutionEvent
from executions.services import segment
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from governance.services import policy_create
from tests.executions.durable_support import CALLS
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls or hooks."""


@pytest.fixture
def sent(monkeypatch):
    calls: list[tuple[str, int]] = []
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda execution_id, _name=task.name: calls.append((_name, execution_id)))
    return calls


class DatabaseGone:
    """A model port whose turn dies on a dropped database connection."""

    def __init__(self):
        self.calls = 0

    def complete(self, **kwargs):
        self.calls += 1
        raise OperationalError("terminating connection due to administrator command")


def test_a_database_error_hands_the_run_back_and_the_next_segment_finishes_it(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_slow_read"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="read"))

    assert services.execution_run_segment(execution_id=execution.pk, llm=DatabaseGone()) is None

    execution.refresh_from_db()
    assert execution.status == Execution.Status.QUEUED
    assert execution.lease_token == "" and execution.lease_expires_at is None
    assert execution.infra_error == "OperationalError"
    assert execution.published_at is None  # the watchdog's next pass sends it
    assert services.executions_requeue_stale() == [execution.pk]

    llm = ScriptedLLM([tool_reply("durable_slow_read", {"marker": "r1"}, call_id="call_r1"), text_reply("done")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    execution.refresh_from_db()
    assert execution.attempts == 2
    assert CALLS == [("durable_slow_read", "r1")]
    assert ExecutionEvent.objects.filter(execution=execution, event_type="run_completed").count() == 1


def test_infrastructure_errors_are_retried_up_to_the_bound_then_the_run_fails_saying_why(
    workspace, owner, sent, settings, django_capture_on_commit_callbacks
):
    settings.RIVER_MAX_SEGMENT_ATTEMPTS = 3
    agent = make_agent(workspace=workspace, owner=owner)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="go"))
    broken = DatabaseGone()

    outcomes = []
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(5):  # the watchdog keeps sending it; each delivery is one attempt
            outcomes.append(services.execution_run_segment(execution_id=execution.pk, llm=broken))
            services.executions_requeue_stale()

    # Three segments tried and handed the run back; the watchdog's third pass found
    # it out of attempts and ended it; later deliveries find nothing to claim.
    assert outcomes == [None] * 5
    assert broken.calls == 3
    execution.refresh_from_db()
    assert execution.status == Execution.Status.FAILED
    assert execution.error["code"] == "INFRASTRUCTURE_ERROR"
    assert "gave up after 3 segment attempts" in execution.error["message"]
    assert "last infrastructure error: OperationalError" in execution.error["message"]
    assert ExecutionEvent.objects.filter(execution=execution, event_type="run_completed").count() == 1
    assert sent.count(("executions.post_process", execution.pk)) == 1
    assert tasks.post_process(execution.pk) is True


def test_attempts_count_again_after_each_pause_so_many_approvals_never_exhaust_them(
    workspace, owner, sent, settings
):
    settings.RIVER_MAX_SEGMENT_ATTEMPTS = 2
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"],
                       action_level="act_with_approval", require_approval_for=["durable_write"])
    approver = _approver(workspace)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write three times"))
    script = [tool_reply("durable_write", {"marker": f"w{i}"}, call_id=f"call_w{i}") for i in range(1, 4)]
    script.append(text_reply("wrote three"))
    llm = ScriptedLLM(script)

    for _ in range(3):
        assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
        approval = ApprovalRequest.objects.get(execution_id=execution.pk, status=ApprovalRequest.Status.PENDING)
        approval_resolve(user=approver, approval_id=approval.pk, status="approved")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    assert [marker for _tool, marker in CALLS] == ["w1", "w2", "w3"]


def test_a_rate_limit_whose_counter_store_is_down_lets_no_write_through(workspace, owner, sent):
    """Governance counters live in PostgreSQL. If the counter cannot be read or
    bumped the call is neither allowed nor blocked: the segment stops as for any
    database error and the write waits for the retry."""
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"])
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="100 calls an hour",
                  conditions="agent.tool_calls_this_hour > 100", enforcement="block", policy_type="rate_limit")
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write"))
    script = [tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1"), text_reply("wrote")]

    with mock.patch("governance.counters.counter_hit", side_effect=OperationalError("server closed the connection")):
        assert services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(list(script))) is None

    assert CALLS == []
    execution.refresh_from_db()
    assert execution.status == Execution.Status.QUEUED and execution.infra_error == "OperationalError"

    assert services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(list(script))) == "success"
    assert CALLS == [("durable_write", "w1")]


def _approver(workspace):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    user = get_user_model().objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


@pytest.mark.django_db(transaction=True)
def test_the_lease_heartbeat_outlives_a_dropped_connection(workspace, owner, settings, sent):
    from django.db.models import QuerySet

    from executions.services.segment import _heartbeats
    from telemetry.faults import infra_fault_count

    settings.RIVER_LEASE_SECONDS = 5  # a beat every 1.67 s
    agent = make_agent(workspace=workspace, owner=owner)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="go"))
    token = services.execution_claim(execution_id=execution.pk)
    first_expiry = Execution.objects.get(pk=execution.pk).lease_expires_at
    before = infra_fault_count(component="database", operation="lease renewal")
    real_update = QuerySet.update
    dropped = []

    def update(self, **kwargs):
        if "lease_expires_at" in kwargs and not dropped:
            dropped.append(True)
            raise OperationalError("terminating connection due to administrator command")
        return real_update(self, **kwargs)

    with mock.patch.object(QuerySet, "update", update), _heartbeats.held(execution.pk, token):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if Execution.objects.get(pk=execution.pk).lease_expires_at > first_expiry:
                break
            time.sleep(0.1)

    assert dropped == [True]
    assert infra_fault_count(component="database", operation="lease renewal") == before + 1
    assert Execution.objects.get(pk=execution.pk).lease_expires_at > first_expiry  # renewed at the next beat


def test_a_database_error_while_recording_the_end_finishes_the_run_on_retry_without_asking_again(
    workspace, owner, sent, monkeypatch
):
    agent = make_agent(workspace=workspace, owner=owner)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="go"))
    real_end = segment.execution_segment_end

    def end_once_broken(**kwargs):
        monkeypatch.setattr(segment, "execution_segment_end", real_end)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(segment, "execution_segment_end", end_once_broken)
    llm = ScriptedLLM([text_reply("All done.")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) is None
    execution.refresh_from_db()
    assert execution.status == Execution.Status.QUEUED

    again = ScriptedLLM([])
    assert services.execution_run_segment(execution_id=execution.pk, llm=again) == "success"
    assert again.requests == []  # the committed final answer is replayed, not asked for again
    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED and execution.result["summary"] == "All done."
    assert ExecutionEvent.objects.filter(execution=execution, event_type="run_completed").count() == 1

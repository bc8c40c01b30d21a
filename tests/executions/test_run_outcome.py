"""A run's outcome, from real runs: stored in the same write as its terminal status,
carried by ``run_completed``, shown and filterable on the executions API, and the same
when computed again from the stored steps (the migration's backfill)."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps as live_apps
from django.contrib.auth import get_user_model

from executions import services, tasks
from executions.models import Execution, ExecutionEvent
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from governance.services import policy_create
from rivercore.events import RunEventType
from tenancy.models import Membership
from tenancy.permissions import Role
from tests.executions import durable_support  # noqa: F401 - registers the durable test tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls."""


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def _run(agent, owner, script, prompt="write w1") -> Execution:
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt=prompt))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(list(script)))
    execution.refresh_from_db()
    return execution


def answered_run(workspace, owner) -> Execution:
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"])
    return _run(agent, owner, [tool_reply("durable_write", {"marker": "w1"}, call_id="c1"), text_reply("Wrote w1.")])


def blocked_run(workspace, owner) -> Execution:
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="No marker writes",
                  conditions={"tool": "durable_write"}, enforcement="block")
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"], name="Blocked agent")
    return _run(agent, owner, [tool_reply("durable_write", {"marker": "w1"}, call_id="c1"),
                               text_reply("A policy stopped the write.")])


def rejected_run(workspace, owner) -> Execution:
    approver = get_user_model().objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=approver, role=Role.ADMIN)
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"], name="Gated agent",
                       action_level="act_with_approval", require_approval_for=["durable_write"])
    script = [tool_reply("durable_write", {"marker": "w1"}, call_id="c1"), text_reply("The approver said no.")]
    llm = ScriptedLLM(script)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write w1"))
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    assert Execution.objects.get(pk=execution.pk).outcome is None  # no outcome while paused
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    approval_resolve(user=approver, approval_id=approval.pk, status="rejected", comment="not today")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    execution.refresh_from_db()
    return execution


def _completed_payload(execution_id: int) -> dict:
    return ExecutionEvent.objects.get(execution_id=execution_id, event_type=RunEventType.RUN_COMPLETED).payload


def test_a_run_that_wrote_and_answered_is_completed_and_answered(workspace, owner, sent):
    execution = answered_run(workspace, owner)
    assert (execution.status, execution.outcome) == ("completed", "answered")
    assert _completed_payload(execution.pk)["outcome"] == "answered"


def test_a_run_a_policy_blocked_is_completed_but_blocked(workspace, owner, sent):
    execution = blocked_run(workspace, owner)
    assert (execution.status, execution.outcome) == ("completed", "blocked")
    assert durable_support.CALLS == []
    assert _completed_payload(execution.pk)["outcome"] == "blocked"


def test_a_run_whose_write_was_rejected_is_completed_but_rejected(workspace, owner, sent):
    execution = rejected_run(workspace, owner)
    assert (execution.status, execution.outcome) == ("completed", "rejected")
    assert _completed_payload(execution.pk) | {"duration_ms": 0} == {
        "status": "completed", "outcome": "rejected", "duration_ms": 0, "turns_used": 2,
        "final_output_summary": "The approver said no."}


def test_a_cancelled_run_is_cancelled(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write"))
    services.execution_cancel(execution=execution, user=owner)
    execution.refresh_from_db()
    assert (execution.status, execution.outcome) == ("cancelled", "cancelled")
    assert _completed_payload(execution.pk)["outcome"] == "cancelled"


def test_the_api_shows_the_outcome_and_filters_by_it(workspace, owner, sent, api_client_for):
    answered, blocked = answered_run(workspace, owner), blocked_run(workspace, owner)
    client = api_client_for(owner)

    listed = {row["id"]: row["outcome"] for row in client.get("/api/v1/executions/").json()["results"]}
    assert listed == {answered.pk: "answered", blocked.pk: "blocked"}
    assert client.get(f"/api/v1/executions/{blocked.pk}/").json()["outcome"] == "blocked"
    only_blocked = client.get("/api/v1/executions/?outcome=blocked").json()["results"]
    assert [row["id"] for row in only_blocked] == [blocked.pk]
    both = client.get("/api/v1/executions/?outcome=answered,blocked").json()["results"]
    assert sorted(row["id"] for row in both) == sorted([answered.pk, blocked.pk])
    assert client.get("/api/v1/executions/?outcome=rejected").json()["results"] == []


@pytest.mark.parametrize("value", ["success", "Answered", "answered,", "answered,nope", "%00", "x" * 500])
def test_an_unknown_outcome_filter_is_a_400_naming_the_field(owner, api_client_for, value):
    response = api_client_for(owner).get("/api/v1/executions/", {"outcome": value})
    assert response.status_code == 400
    assert "outcome" in response.json()["error"]["details"]


def test_the_outcome_filter_shows_an_outsider_none_of_our_runs(workspace, owner, outsider, sent, api_client_for):
    answered_run(workspace, owner)
    response = api_client_for(outsider).get("/api/v1/executions/?outcome=answered")
    assert response.status_code == 200 and response.json()["results"] == []


def test_the_backfill_computes_from_stored_steps_what_the_run_end_stored(workspace, owner, sent):
    # The block is a workspace policy: the runs it must not stop go first.
    runs = [rejected_run(workspace, owner), answered_run(workspace, owner), blocked_run(workspace, owner)]
    agent = runs[1].agent
    cancelled = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write"))
    services.execution_cancel(execution=cancelled, user=owner)
    running = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="queued"))
    at_end = dict(Execution.objects.values_list("pk", "outcome"))
    Execution.objects.update(outcome=None)

    migration = importlib.import_module("executions.migrations.0014_execution_outcome")
    migration.outcomes_backfill(live_apps, None)

    assert dict(Execution.objects.values_list("pk", "outcome")) == at_end
    assert at_end[running.pk] is None and at_end[cancelled.pk] == "cancelled"
    assert sorted(at_end[r.pk] for r in runs) == ["answered", "blocked", "rejected"]

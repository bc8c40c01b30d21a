"""The approval gate on durable runs: pause, resolve, resume; edit; reject; block;
expiry and reminders; auto-approval.

Runs are driven deterministically: ``execution_start`` then
``execution_run_segment`` with a ScriptedLLM, exactly as a worker would, minus
Celery (the queued tasks are captured instead of sent).
"""

from __future__ import annotations

import json
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from executions import services, tasks
from executions.models import Execution
from governance import tasks as governance_tasks
from governance.models import ApprovalRequest, AuditLogEntry
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import SCORE_TOOL, WRITE_TOOL

pytestmark = pytest.mark.django_db

PROPOSED = {"ticket_id": 7, "amount": 40.0}


@pytest.fixture(autouse=True)
def _clean_calls():
    approval_tools.reset()
    yield
    approval_tools.reset()


def approval_agent(workspace, owner, **overrides):
    options = {
        "tools": [WRITE_TOOL], "action_level": "act_with_approval", "require_approval_for": [WRITE_TOOL],
        "approver_roles": ["admin", "editor"],
    }
    options.update(overrides)
    return make_agent(workspace=workspace, owner=owner, **options)


def start_and_pause(workspace, owner, llm, **agent_options):
    agent = approval_agent(workspace, owner, **agent_options)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="Refund ticket 7"))
    services.execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()
    return execution


def resolve(client, approval, body):
    return client.post(f"/api/v1/approvals/{approval.pk}/resolve", body, format="json")


def resume_queued(django_capture_on_commit_callbacks, action):
    """Run ``action``; return the execution ids whose next segment was queued."""
    with mock.patch.object(tasks.run_segment, "delay") as delay, \
            django_capture_on_commit_callbacks(execute=True):
        result = action()
    return result, [c.args[0] for c in delay.call_args_list]


def steps_of(execution):
    return list(execution.steps.order_by("step_number").values_list("step_number", "step_type", "call_id", "status"))


def tool_call_arguments(messages):
    out = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            out.append((call["function"]["name"], json.loads(call["function"]["arguments"])))
    return out


def test_round_trip_pauses_without_holding_a_worker_then_resumes_where_it_stopped(
    workspace, owner, api_client_for, django_capture_on_commit_callbacks
):
    # First turn proposes the refund; after approval the model concludes.
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund"), text_reply("Refunded 40 EUR.")])
    execution = start_and_pause(workspace, owner, llm)

    assert execution.status == Execution.Status.AWAITING_APPROVAL
    assert execution.lease_token == "" and execution.lease_expires_at is None  # no worker holds it
    assert approval_tools.calls_of(WRITE_TOOL) == []
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    assert approval.status == ApprovalRequest.Status.PENDING
    assert approval.tool_name == WRITE_TOOL
    assert approval.tool_call_id == "call_refund"
    assert approval.proposed_payload == {**PROPOSED, "note": ""}
    assert approval.approver_roles == ["admin", "editor"]
    assert WRITE_TOOL in approval.risk_context
    assert approval.confidence_score is None and approval.auto_approve_eligible is False
    lifetime = approval.expires_at - approval.created_at
    assert timedelta(minutes=1439) < lifetime <= timedelta(minutes=1440)

    snapshot = execution.context_snapshot
    assert snapshot["pending"]["call_id"] == "call_refund"
    assert snapshot["pending"]["arguments"] == {**PROPOSED, "note": ""}
    assert ("approval_test_write", PROPOSED) in tool_call_arguments(snapshot["messages"])
    assert snapshot["counters"]["turn"] == 1
    assert snapshot["step_count"] == execution.steps.count()
    pending_check = execution.steps.get(step_type="governance_check", call_id="call_refund")
    assert pending_check.status == "pending" and pending_check.governance_decision == "APPROVAL_REQUIRED"
    before = steps_of(execution)

    response, queued = resume_queued(
        django_capture_on_commit_callbacks, lambda: resolve(api_client_for(owner), approval, {"status": "approved"})
    )
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "approved"
    assert queued == [execution.pk]
    execution.refresh_from_db()
    assert execution.status == Execution.Status.QUEUED
    assert AuditLogEntry.objects.filter(event_type="approval_approved", approval_id=approval.pk,
                                        actor=owner).count() == 1

    services.execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED
    assert execution.result["summary"] == "Refunded 40 EUR."
    assert approval_tools.calls_of(WRITE_TOOL) == [{**PROPOSED, "note": ""}]
    assert len(llm.requests) == 2 and llm.replies == []  # the first turn was not asked again

    after = steps_of(execution)
    assert after[: len(before)] == before  # history untouched
    numbers = [n for n, *_ in after]
    assert numbers == list(range(1, len(after) + 1))  # numbering continues without gaps or repeats
    new = after[len(before):]
    assert new[0][1] == "governance_check" and new[0][2] == "call_refund"  # the resolution
    assert [s[1] for s in new[1:3]] == ["tool_call", "observation"]
    assert sum(1 for s in after if s[1] == "tool_call") == 1


def test_edit_and_approve_sends_only_the_edited_values(
    workspace, owner, api_client_for, django_capture_on_commit_callbacks
):
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund"), text_reply("Done.")])
    execution = start_and_pause(workspace, owner, llm)
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    edited = {"ticket_id": 7, "amount": 25.0, "note": "partial refund"}

    response, queued = resume_queued(django_capture_on_commit_callbacks, lambda: resolve(
        api_client_for(owner), approval,
        {"status": "edited_approved", "modified_args": edited, "resolution_comment": "Only half."},
    ))
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "edited"
    assert queued == [execution.pk]
    entry = AuditLogEntry.objects.get(event_type="approval_edited", approval_id=approval.pk)
    assert entry.details["diff"] == {
        "amount": {"from": 40.0, "to": 25.0}, "note": {"from": "", "to": "partial refund"},
    }

    services.execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED
    assert approval_tools.calls_of(WRITE_TOOL) == [edited]

    seen = llm.requests[1]["messages"]
    assert tool_call_arguments(seen) == [(WRITE_TOOL, edited)]
    assert "40.0" not in json.dumps(seen)  # the original amount never reaches the model again
    observation = next(m for m in seen if m.get("role") == "tool")
    assert "25.0" in observation["content"]


def test_edit_with_arguments_outside_the_schema_is_refused_naming_the_field(
    workspace, owner, api_client_for, django_capture_on_commit_callbacks
):
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund")])
    execution = start_and_pause(workspace, owner, llm)
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)

    response, queued = resume_queued(django_capture_on_commit_callbacks, lambda: resolve(
        api_client_for(owner), approval,
        {"status": "edited_approved", "modified_args": {"ticket_id": 7, "amount": 9000}},
    ))
    assert response.status_code == 400
    error = response.json()["error"]
    assert "modified_args.amount" in error["details"]
    unknown = resolve(api_client_for(owner), approval,
                      {"status": "edited_approved", "modified_args": {"ticket_id": 7, "amount": 5, "vip": True}})
    assert unknown.status_code == 400 and "modified_args.vip" in unknown.json()["error"]["details"]
    missing = resolve(api_client_for(owner), approval, {"status": "edited_approved"})
    assert missing.status_code == 400 and "modified_args" in missing.json()["error"]["details"]

    assert queued == []
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING
    assert not AuditLogEntry.objects.filter(event_type="approval_edited").exists()
    execution.refresh_from_db()
    assert execution.status == Execution.Status.AWAITING_APPROVAL


def test_blocked_write_never_reaches_its_tool_and_the_model_is_told(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="read_only")
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="Refund ticket 7"))
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund"), text_reply("I cannot refund.")])

    services.execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()

    assert execution.status == Execution.Status.COMPLETED
    assert approval_tools.calls_of(WRITE_TOOL) == []
    assert not ApprovalRequest.objects.filter(execution_id=execution.pk).exists()
    check = execution.steps.get(step_type="governance_check", call_id="call_refund")
    assert check.governance_decision == "BLOCKED"
    assert not execution.steps.filter(step_type="tool_call").exists()
    told = [m for m in llm.requests[1]["messages"] if m.get("role") == "tool"]
    assert len(told) == 1 and told[0]["tool_call_id"] == "call_refund"
    assert '"blocked": true' in told[0]["content"]


def test_rejection_reaches_the_model_with_the_comment_and_the_run_goes_on(
    workspace, owner, editor, api_client_for, django_capture_on_commit_callbacks
):
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund"),
                       text_reply("Understood, no refund.")])
    execution = start_and_pause(workspace, owner, llm)
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)

    response, queued = resume_queued(django_capture_on_commit_callbacks, lambda: resolve(
        api_client_for(editor), approval,
        {"status": "rejected", "resolution_comment": "Customer was already refunded by phone."},
    ))
    assert response.status_code == 200
    assert queued == [execution.pk]
    assert AuditLogEntry.objects.get(event_type="approval_rejected").details["comment"] == \
        "Customer was already refunded by phone."

    services.execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED
    assert execution.result["summary"] == "Understood, no refund."
    assert approval_tools.calls_of(WRITE_TOOL) == []
    told = [m for m in llm.requests[1]["messages"] if m.get("role") == "tool"]
    assert len(told) == 1 and "already refunded by phone" in told[0]["content"]


def test_expired_request_ends_the_run_approval_expired(workspace, owner, django_capture_on_commit_callbacks):
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund")])
    execution = start_and_pause(workspace, owner, llm)
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    fresh = start_and_pause(workspace, owner, ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="c2")]))
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    with mock.patch.object(tasks.post_process, "delay") as post_process, \
            django_capture_on_commit_callbacks(execute=True):
        assert governance_tasks.expire_approvals() == 1

    approval.refresh_from_db()
    execution.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.EXPIRED
    assert execution.status == Execution.Status.APPROVAL_EXPIRED
    assert execution.finished_at is not None and execution.error["code"] == "APPROVAL_EXPIRED"
    assert AuditLogEntry.objects.filter(event_type="approval_expired", approval_id=approval.pk).count() == 1
    post_process.assert_called_once_with(execution.pk)
    assert approval_tools.calls_of(WRITE_TOOL) == []
    # The other run's request is not due and stays untouched.
    fresh.refresh_from_db()
    assert fresh.status == Execution.Status.AWAITING_APPROVAL
    assert governance_tasks.expire_approvals() == 0


def test_approvers_get_one_reminder_shortly_before_expiry(
    workspace, owner, settings, django_capture_on_commit_callbacks
):
    settings.RIVER_APPROVAL_REMINDER_MINUTES = 60
    execution = start_and_pause(workspace, owner, ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="c1")]))
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    later = start_and_pause(workspace, owner, ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="c2")]))
    later_approval = ApprovalRequest.objects.get(execution_id=later.pk)
    now = timezone.now()
    # Opened 23 h ago, expires in 30 min: inside the reminder window.
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        created_at=now - timedelta(hours=23), expires_at=now + timedelta(minutes=30)
    )

    from governance import tasks as governance_tasks

    with mock.patch.object(governance_tasks.notify_approval, "delay") as notify, \
            django_capture_on_commit_callbacks(execute=True):
        governance_tasks.expire_approvals()
        governance_tasks.expire_approvals()

    assert notify.call_count == 1
    assert notify.call_args == mock.call(str(approval.pk), reminder=True)
    approval.refresh_from_db()
    later_approval.refresh_from_db()
    assert approval.reminder_sent_at is not None
    assert approval.status == ApprovalRequest.Status.PENDING  # a reminder does not expire it
    assert later_approval.reminder_sent_at is None


def test_a_broker_outage_while_reminding_does_not_stop_the_expiry_sweep(
    workspace, owner, settings, caplog, django_capture_on_commit_callbacks
):
    settings.RIVER_APPROVAL_REMINDER_MINUTES = 60
    due = start_and_pause(workspace, owner, ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="c1")]))
    soon = start_and_pause(workspace, owner, ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="c2")]))
    now = timezone.now()
    ApprovalRequest.objects.filter(execution_id=due.pk).update(expires_at=now - timedelta(seconds=1))
    ApprovalRequest.objects.filter(execution_id=soon.pk).update(
        created_at=now - timedelta(hours=5), expires_at=now + timedelta(minutes=5)
    )

    from governance import tasks as governance_tasks

    with mock.patch.object(governance_tasks.notify_approval, "delay", side_effect=ConnectionError("broker down")), \
            mock.patch.object(tasks.post_process, "delay"), django_capture_on_commit_callbacks(execute=True):
        assert governance_tasks.expire_approvals() == 1

    assert Execution.objects.get(pk=due.pk).status == Execution.Status.APPROVAL_EXPIRED
    assert "for the reminder of approval" in caplog.text


def test_auto_approve_condition_above_threshold_proceeds_without_pausing(workspace, owner):
    approval_tools.SCORES[7] = 0.99
    llm = ScriptedLLM([
        tool_reply(SCORE_TOOL, {"ticket_id": 7}, call_id="call_score"),
        tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund"),
        text_reply("Refunded automatically."),
    ])
    agent = approval_agent(
        workspace, owner, tools=[SCORE_TOOL, WRITE_TOOL],
        auto_approve_conditions=[{"tool": WRITE_TOOL, "condition": "confidence_score > 0.95"}],
    )
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="Refund ticket 7"))
    services.execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()

    assert execution.status == Execution.Status.COMPLETED
    assert approval_tools.calls_of(WRITE_TOOL) == [{**PROPOSED, "note": ""}]
    assert not ApprovalRequest.objects.filter(execution_id=execution.pk).exists()
    entry = AuditLogEntry.objects.get(event_type="approval_auto_approved", execution_id=execution.pk)
    assert entry.details["tool_name"] == WRITE_TOOL
    assert entry.details["condition"] == "confidence_score > 0.95"
    check = execution.steps.get(step_type="governance_check", call_id="call_refund")
    assert check.output["resolution"]["auto_approved"] is True


def test_auto_approve_condition_below_threshold_pauses(workspace, owner):
    approval_tools.SCORES[7] = 0.6
    llm = ScriptedLLM([
        tool_reply(SCORE_TOOL, {"ticket_id": 7}, call_id="call_score"),
        tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund"),
    ])
    execution = start_and_pause(
        workspace, owner, llm, tools=[SCORE_TOOL, WRITE_TOOL],
        auto_approve_conditions=[{"tool": WRITE_TOOL, "condition": "confidence_score > 0.95"}],
    )

    assert execution.status == Execution.Status.AWAITING_APPROVAL
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    assert approval.confidence_score == pytest.approx(0.6)
    assert approval.auto_approve_eligible is True
    assert approval_tools.calls_of(WRITE_TOOL) == []
    assert not AuditLogEntry.objects.filter(event_type="approval_auto_approved").exists()

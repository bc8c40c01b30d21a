"""Escalation chains (issue 29 §3): a request nobody decides moves to the next group at
its escalation time, the new group is notified and the old one's notifications resolve,
and it still expires at its expiry. The clock is moved, nothing sleeps."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from executions import tasks
from executions.models import Execution
from governance import tasks as governance_tasks
from governance.models import ApprovalRequest, AuditLogEntry, Notification
from governance.notifications import approval_notifications_send
from tests.governance.test_approval_quorum import pause, quorum_agent, resolve

CHAIN = [{"after_minutes": 30, "approver_roles": ["admin"]}]


def at(moment):
    """Move River's clock (every module reads django.utils.timezone.now)."""
    return mock.patch("django.utils.timezone.now", return_value=moment)


def sweep(capture):
    with mock.patch.object(governance_tasks.notify_approval, "delay") as notify, \
            mock.patch.object(tasks.post_process, "delay"), capture(execute=True):
        expired = governance_tasks.expire_approvals()
    return expired, notify


@pytest.mark.django_db
def test_a_waiting_request_moves_to_the_next_group_then_expires(
    workspace, owner, editor, api_client_for, django_capture_on_commit_callbacks
):
    agent = quorum_agent(workspace, owner, approver_roles=("editor",), escalation=CHAIN, timeout=120)
    execution, approval = pause(agent)
    opened = approval.created_at
    assert approval.next_escalation_at == opened + timedelta(minutes=30)
    approval_notifications_send(approval_id=approval.pk)  # the editors are asked first
    assert Notification.objects.filter(user=editor, approval_id=approval.pk, kind="approval_requested").exists()

    with at(opened + timedelta(minutes=29)):
        assert sweep(django_capture_on_commit_callbacks)[0] == 0
    approval.refresh_from_db()
    assert approval.approver_roles == ["editor"] and approval.escalation_level == 0  # not yet

    with at(opened + timedelta(minutes=31)):
        expired, notify = sweep(django_capture_on_commit_callbacks)
    assert expired == 0
    approval.refresh_from_db()
    assert approval.approver_roles == ["admin"] and approval.escalation_level == 1
    assert approval.escalated_at == opened + timedelta(minutes=31) and approval.next_escalation_at is None
    assert notify.call_args_list == [mock.call(str(approval.pk), reminder=False)]
    entry = AuditLogEntry.objects.get(approval_id=approval.pk, event_type="approval_escalated")
    assert entry.details["from_roles"] == ["editor"] and entry.details["to_roles"] == ["admin"]
    # The editor may no longer decide: their notification says where it went.
    mine = Notification.objects.get(user=editor, approval_id=approval.pk)
    assert mine.resolved_at is not None and mine.resolution.startswith("Escalated to admin")
    assert resolve(api_client_for(editor), approval, {"status": "approved"}).status_code == 403
    # The admins are asked, with the escalation named.
    approval_notifications_send(approval_id=approval.pk)
    told = Notification.objects.get(user=owner, approval_id=approval.pk, kind="approval_escalated")
    assert told.title.startswith("Escalated to you") and told.resolved_at is None
    body = api_client_for(owner).get(f"/api/v1/approvals/{approval.pk}/").json()
    assert body["escalation"]["level"] == 1 and body["escalation"]["chain"] == CHAIN

    with at(opened + timedelta(minutes=45)):
        assert sweep(django_capture_on_commit_callbacks)[0] == 0
    assert AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approval_escalated").count() == 1

    with at(opened + timedelta(minutes=121)):
        assert sweep(django_capture_on_commit_callbacks)[0] == 1
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.EXPIRED
    assert Execution.objects.get(pk=execution.pk).status == Execution.Status.APPROVAL_EXPIRED


@pytest.mark.django_db
def test_a_two_step_chain_moves_one_step_per_due_time(workspace, owner, django_capture_on_commit_callbacks):
    chain = [{"after_minutes": 10, "approver_roles": ["admin"]}, {"after_minutes": 20, "approver_roles": ["org_admin"]}]
    agent = quorum_agent(workspace, owner, approver_roles=("editor",), escalation=chain, timeout=60)
    _, approval = pause(agent)
    opened = approval.created_at

    with at(opened + timedelta(minutes=11)):
        sweep(django_capture_on_commit_callbacks)
    approval.refresh_from_db()
    assert (approval.approver_roles, approval.next_escalation_at) == (["admin"], opened + timedelta(minutes=20))
    with at(opened + timedelta(minutes=21)):
        sweep(django_capture_on_commit_callbacks)
    approval.refresh_from_db()
    assert approval.approver_roles == ["org_admin"] and approval.escalation_level == 2
    levels = AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approval_escalated")
    assert sorted(e.details["level"] for e in levels) == [1, 2]


@pytest.mark.django_db
def test_a_decided_request_never_escalates(workspace, owner, editor, api_client_for,
                                           django_capture_on_commit_callbacks):
    agent = quorum_agent(workspace, owner, approver_roles=("editor",), escalation=CHAIN, timeout=120)
    _, approval = pause(agent)
    with mock.patch.object(tasks.run_segment, "delay"):
        assert resolve(api_client_for(editor), approval, {"status": "approved"}).status_code == 200

    with at(timezone.now() + timedelta(minutes=40)):
        sweep(django_capture_on_commit_callbacks)
    approval.refresh_from_db()
    assert approval.escalation_level == 0 and approval.approver_roles == ["editor"]
    assert not AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approval_escalated").exists()


@pytest.mark.django_db
def test_approvals_given_before_an_escalation_still_count(workspace, owner, editor, api_client_for,
                                                          django_capture_on_commit_callbacks):
    agent = quorum_agent(workspace, owner, approver_roles=("editor",), escalation=CHAIN, timeout=120,
                         quorum=[{"approvals": 2}])
    _, approval = pause(agent)
    assert resolve(api_client_for(editor), approval, {"status": "approved"}).json()["quorum"]["given"] == 1
    with at(approval.created_at + timedelta(minutes=31)):
        sweep(django_capture_on_commit_callbacks)

    with mock.patch.object(tasks.run_segment, "delay"):
        decided = resolve(api_client_for(owner), approval, {"status": "approved"})
    assert decided.json()["status"] == "approved" and decided.json()["quorum"]["given"] == 2

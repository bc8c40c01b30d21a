"""Notifications follow the work: an approval's notifications resolve for everyone when it
is decided, expires or its run is cancelled; the badge counts only requests you may
decide; the person who started a run hears when it pauses, asks them something and ends
(per their preferences); texts show local times."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone

from executions import services, tasks
from executions.models import Execution
from executions.services.finish import run_end_failed
from governance import notifications as notices
from governance.approvals import approval_expire, approvals_pending_count
from governance.models import ApprovalRequest, Notification, NotificationPreference
from governance.notifications import approval_notifications_send, notifications_unread_count
from governance.resolution import approval_resolve
from tenancy.models import Membership
from tenancy.permissions import Role
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL

pytestmark = pytest.mark.django_db

PROPOSED = {"ticket_id": 7, "amount": 40.0}
QUESTION = {"interaction_type": "clarification_request", "message": "Which ticket, 7 or 8?"}


@pytest.fixture(autouse=True)
def _clean_calls():
    approval_tools.reset()


@pytest.fixture
def starter(workspace, django_user_model):
    """An analyst who starts runs but may not approve."""
    user = django_user_model.objects.create_user(username="starter", password="pw-starter",
                                                 email="starter@example.com", first_name="Sam")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ANALYST)
    return user


def _paused(workspace, owner, starter, *, approver_roles=("admin", "editor"), replies=None):
    agent = make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="act_with_approval",
                       require_approval_for=[WRITE_TOOL], approver_roles=list(approver_roles))
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=starter, prompt="Refund ticket 7"))
    llm = ScriptedLLM(replies or [tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund"), text_reply("Refunded.")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    approval_notifications_send(approval_id=approval.pk)
    return execution, approval, llm


def _open(user, kind):
    return Notification.objects.filter(user=user, kind=kind, resolved_at__isnull=True)


def test_the_bell_clears_for_every_approver_when_another_decides(workspace, owner, editor, starter):
    execution, approval, _ = _paused(workspace, owner, starter)
    assert notifications_unread_count(user=owner) == 1
    assert notifications_unread_count(user=editor) == 1
    assert _open(starter, notices.RUN_AWAITING_APPROVAL).count() == 1

    with mock.patch.object(tasks.run_segment, "delay"):
        approval_resolve(user=editor, approval_id=approval.pk, status="approved")

    assert notifications_unread_count(user=owner) == 0
    assert notifications_unread_count(user=editor) == 0
    theirs = Notification.objects.get(user=owner, kind=notices.APPROVAL_REQUESTED)
    assert theirs.read_at is None  # resolved, not read: the owner never opened it
    assert theirs.resolved_by == editor
    assert theirs.resolution.startswith("Approved by editor, ")
    # The starter's "waiting for approval" resolves with the request too.
    assert _open(starter, notices.RUN_AWAITING_APPROVAL).count() == 0


def test_an_expired_request_resolves_its_notifications(workspace, owner, editor, starter):
    _, approval, _ = _paused(workspace, owner, starter)
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    with transaction.atomic():
        assert approval_expire(approval_id=approval.pk) is not None

    rows = Notification.objects.filter(approval_id=approval.pk)
    assert rows.count() == 3  # owner, editor, starter
    assert all(row.resolved_at and row.resolution.startswith("Expired without a decision") for row in rows)
    assert notifications_unread_count(user=owner) == 0


def test_cancelling_the_run_resolves_its_approval_notifications_naming_who(workspace, owner, editor, starter):
    execution, approval, _ = _paused(workspace, owner, starter)

    services.execution_cancel(execution=execution, user=owner)

    row = Notification.objects.get(user=editor, approval_id=approval.pk)
    assert row.resolution.startswith("Closed: the run was cancelled by owner")
    assert notifications_unread_count(user=editor) == 0


def test_nobody_is_asked_for_a_request_they_cannot_decide(workspace, owner, editor, starter):
    _, approval, _ = _paused(workspace, owner, starter, approver_roles=("admin",))

    assert Notification.objects.filter(user=owner, kind=notices.APPROVAL_REQUESTED).count() == 1
    assert not Notification.objects.filter(user=editor, kind=notices.APPROVAL_REQUESTED).exists()
    assert not Notification.objects.filter(user=starter, kind=notices.APPROVAL_REQUESTED).exists()


def test_the_approvals_badge_counts_only_requests_you_may_decide(workspace, owner, editor, member):
    def pending(roles, started_by=None):
        ApprovalRequest.objects.create(workspace=workspace, execution_id=1, tool_name="refund",
                                       approver_roles=list(roles), run_started_by=started_by,
                                       expires_at=timezone.now() + timedelta(hours=1))

    pending(["admin"])
    pending(["admin", "editor"])
    pending(["editor"], started_by=editor)  # editor's own run: someone else decides

    assert approvals_pending_count(user=owner, workspace=workspace) == 2
    assert approvals_pending_count(user=editor, workspace=workspace) == 1
    assert approvals_pending_count(user=member, workspace=workspace) == 0  # analysts never decide


def test_the_starter_hears_needs_approval_and_then_done_when_they_ask_for_every_end(
        workspace, owner, editor, starter):
    NotificationPreference.objects.create(user=starter, every_end=True)
    execution, approval, llm = _paused(workspace, owner, starter)
    waiting = Notification.objects.get(user=starter, kind=notices.RUN_AWAITING_APPROVAL)
    assert f"run {execution.pk} is waiting for approval of {WRITE_TOOL}" in waiting.title
    assert waiting.url == f"/runs/{execution.pk}/#approval-{approval.pk}"

    with mock.patch.object(tasks.run_segment, "delay"):
        approval_resolve(user=editor, approval_id=approval.pk, status="approved")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    assert services.execution_post_process(execution_id=execution.pk)

    done = Notification.objects.get(user=starter, kind=notices.RUN_ENDED)
    assert done.title.endswith(f"run {execution.pk} finished with an answer")
    assert done.url == f"/runs/{execution.pk}/"
    assert "Refunded." in done.body


def test_an_answered_run_is_quiet_by_default_but_a_failed_one_is_not(workspace, owner, editor, starter):
    execution, approval, llm = _paused(workspace, owner, starter)
    with mock.patch.object(tasks.run_segment, "delay"):
        approval_resolve(user=editor, approval_id=approval.pk, status="approved")
    services.execution_run_segment(execution_id=execution.pk, llm=llm)
    services.execution_post_process(execution_id=execution.pk)
    assert not Notification.objects.filter(user=starter, kind=notices.RUN_ENDED).exists()

    second, _, _ = _paused(workspace, owner, starter)
    with transaction.atomic():
        run_end_failed(Execution.objects.select_for_update().get(pk=second.pk), code="X", message="the disk is full")
    services.execution_post_process(execution_id=second.pk)
    failed = Notification.objects.get(user=starter, kind=notices.RUN_ENDED)
    assert failed.title.endswith(f"run {second.pk} failed")
    assert "the disk is full" in failed.body


def test_a_cancelled_run_is_an_end_other_than_answered(workspace, owner, starter):
    execution, _, _ = _paused(workspace, owner, starter)
    services.execution_cancel(execution=execution, user=owner)
    services.execution_post_process(execution_id=execution.pk)
    assert Notification.objects.get(user=starter, kind=notices.RUN_ENDED).title.endswith("was cancelled")


def test_a_question_reaches_the_starter_and_resolves_when_answered(workspace, owner, starter):
    agent = make_agent(workspace=workspace, owner=owner, tools=["ask_user"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=starter, prompt="refund the right ticket"))
    llm = ScriptedLLM([tool_reply("ask_user", QUESTION, "q1"), text_reply("Refunded 8.")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_interaction"

    asked = Notification.objects.get(user=starter, kind=notices.RUN_QUESTION)
    assert "Which ticket, 7 or 8?" in asked.title
    assert asked.url == f"/runs/{execution.pk}/#question-q1"
    assert notifications_unread_count(user=starter) == 1

    services.execution_respond(execution=execution, user=starter, user_response="8")
    asked.refresh_from_db()
    assert asked.resolution == "Answered by Sam"
    assert notifications_unread_count(user=starter) == 0


def test_preferences_choose_the_channels(workspace, owner, starter, django_capture_on_commit_callbacks):
    NotificationPreference.objects.create(user=starter, in_app=False, email=True)
    with django_capture_on_commit_callbacks(execute=True):
        execution, _, _ = _paused(workspace, owner, starter)
    assert not Notification.objects.filter(user=starter).exists()
    sent = [message for message in mail.outbox if message.to == ["starter@example.com"]]
    assert len(sent) == 1
    assert f"/runs/{execution.pk}/" in sent[0].body


def test_an_event_turned_off_sends_nothing(workspace, owner, starter):
    NotificationPreference.objects.create(user=starter, approval_pause=False)
    _paused(workspace, owner, starter)
    assert not Notification.objects.filter(user=starter).exists()


def test_texts_show_the_workspaces_local_time_not_an_iso_stamp(workspace, owner, starter):
    workspace.time_zone = "Asia/Tokyo"
    workspace.save(update_fields=["time_zone"])
    _, approval, _ = _paused(workspace, owner, starter)
    row = Notification.objects.get(user=owner, kind=notices.APPROVAL_REQUESTED)
    local = timezone.localtime(approval.expires_at, timezone.get_fixed_timezone(9 * 60))
    assert f"Expires: {local:%b} {local.day}, {local:%Y}, {local:%H:%M} Asia/Tokyo" in row.body
    assert approval.expires_at.isoformat() not in row.body
    assert "Review: /approvals/" not in row.body  # in-app, the notification itself links to the page

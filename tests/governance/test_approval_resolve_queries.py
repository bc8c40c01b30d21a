"""Resolving an approval over the API costs a fixed, small number of statements: the
token; the request with the caller's standing (one statement, so the 403 comes before
the lock); under the lock, the run, the request with the standing again (the check that
decides), its UPDATE, the notifications' UPDATE returning whom to tell, the audit entry,
the run with its last step and event numbers, the decision step, the run's UPDATE and
the ``approval_resolved`` event. Pinned so a lookup added to the resume path is noticed;
the behaviour the statements carry is checked beside the count."""

from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from executions.models import Execution, ExecutionEvent, ExecutionStep
from governance.models import ApprovalRequest, AuditLogEntry, Notification
from tests.governance.test_approvals_api import paused_run

EXPECTED = ["SELECT", "SELECT", "SELECT", "SELECT", "UPDATE", "UPDATE", "INSERT", "SELECT", "INSERT", "UPDATE",
            "INSERT"]


def _resolve(client, approval) -> list[str]:
    with mock.patch("executions.tasks.run_segment.delay"), CaptureQueriesContext(connection) as queries:
        response = client.post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["requester"]  # the run's requester, read with the request under the lock
    return [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]


@pytest.mark.django_db
def test_a_resolve_costs_eleven_statements_and_still_does_everything(workspace, owner, editor, api_client_for):
    client = api_client_for(editor)
    _resolve(client, paused_run(workspace, owner)[1])  # the token's first use marks it: one UPDATE more
    execution, approval = paused_run(workspace, owner)
    Notification.objects.create(user=owner, workspace=workspace, kind="approval_requested", title="Approve?",
                                approval_id=approval.pk, url=f"/approvals/{approval.pk}/")

    statements = _resolve(client, approval)

    assert [sql.split()[0] for sql in statements] == EXPECTED, statements
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED and approval.resolved_by == editor
    assert AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approval_approved", actor=editor).exists()
    notes = list(Notification.objects.filter(approval_id=approval.pk))
    assert notes and all(n.resolved_at is not None and n.resolved_by == editor for n in notes)
    run = Execution.objects.get(pk=execution.pk)
    assert run.status == Execution.Status.QUEUED
    steps = list(ExecutionStep.objects.filter(execution=run).order_by("step_number").values_list("step_number",
                                                                                                  flat=True))
    assert steps == list(range(1, len(steps) + 1))  # the decision step numbered after the last one
    seqs = list(ExecutionEvent.objects.filter(execution=run).order_by("seq").values_list("seq", "event_type"))
    assert [s for s, _ in seqs] == list(range(1, len(seqs) + 1)) and seqs[-1][1] == "approval_resolved"


@pytest.mark.django_db
def test_the_standing_read_with_the_request_is_the_callers_own(workspace, owner, editor, member, api_client_for):
    """A request read with one user's standing is never authorized with it for another."""
    from governance.approvals import approval_authorize, approval_get_for_user
    from rivercore.errors import PermissionDenied

    _, approval = paused_run(workspace, owner)
    read_by_editor = approval_get_for_user(user=editor, approval_id=approval.pk)
    approval_authorize(user=editor, approval=read_by_editor)  # an editor may resolve it
    with pytest.raises(PermissionDenied):
        approval_authorize(user=member, approval=read_by_editor)  # an analyst may not, whoever read the row


@pytest.mark.django_db
def test_the_resume_message_leaves_before_the_slack_check_reads_the_database(workspace, owner, editor,
                                                                              api_client_for,
                                                                              django_capture_on_commit_callbacks):
    """After-commit work runs in the order it was registered, and the POST → next model
    call latency counts everything before the run's message: the Slack messages' check (a
    query) comes after it."""
    from governance import slack_updates

    _, approval = paused_run(workspace, owner)
    happened: list[str] = []
    real_filter = slack_updates.SlackApprovalMessage.objects.filter

    def filter_recorded(*args, **kwargs):
        happened.append("slack check")
        return real_filter(*args, **kwargs)

    with mock.patch("executions.tasks.run_segment.delay", side_effect=lambda *a, **k: happened.append("resume sent")), \
            mock.patch.object(slack_updates.SlackApprovalMessage.objects, "filter", filter_recorded), \
            django_capture_on_commit_callbacks(execute=True):
        response = api_client_for(editor).post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved"},
                                               format="json")
    assert response.status_code == 200, response.content
    assert happened == ["resume sent", "slack check"]

"""The "unknown outcome" card (issue 31 §1): "River sent this call but does not know
whether it happened", Done / Not done, retry; the same rules as the approval card; the
answer audited and the run resumed. The engine side (a real MCP server, a worker that
dies) is tests/toolservers/test_unknown_outcome.py; here the pause is made directly."""

from __future__ import annotations

from unittest import mock

import pytest
from django.test import Client

from executions import services, tasks
from executions.models import Execution
from governance.approvals import approval_request_open
from governance.models import ApprovalRequest, AuditLogEntry
from rivercore import unknown_outcome
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
TOOL = "mcp:git/git_commit"


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def paused(workspace, requester) -> ApprovalRequest:
    """A run paused on an unknown-outcome request for call c1, started by ``requester``."""
    agent = make_agent(workspace=workspace, owner=requester)
    execution = services.execution_start(
        agent=agent, request=services.person_run_request(agent=agent, user=requester, prompt="commit")
    )
    Execution.objects.filter(pk=execution.pk).update(status=Execution.Status.AWAITING_APPROVAL)
    asked = unknown_outcome.payload(tool_name=TOOL, arguments={"message": "<b>Once</b>"}, reasoning_summary="")
    return approval_request_open(
        workspace_id=workspace.pk,
        execution_id=execution.pk,
        agent_id=agent.pk,
        call_id="c1",
        payload=asked.model_dump(mode="json"),
        approver_roles=["admin", "editor"],
        escalation_timeout_minutes=60,
        run_started_by_id=requester.pk,
    )


def test_the_card_asks_and_done_is_recorded_audited_and_resumes(
    workspace, owner, editor, django_capture_on_commit_callbacks
):
    approval = paused(workspace, owner)
    page = browser(editor).get(f"/approvals/{approval.pk}/").content.decode()
    assert "River sent this call but does not know whether it happened" in page
    assert 'value="done"' in page and 'value="not_done"' in page
    assert 'value="approved"' not in page  # not an approve / reject card
    assert "<b>Once</b>" not in page and "&lt;b&gt;Once&lt;/b&gt;" in page  # arguments escaped

    with mock.patch.object(tasks.run_segment, "delay") as queued, django_capture_on_commit_callbacks(execute=True):
        answer = browser(editor).post(
            f"/approvals/{approval.pk}/confirm-outcome", {"outcome": "done", "resolution_comment": "in the log"}, **HTMX
        )
    assert answer.status_code == 200
    assert "Confirmed done" in answer.content.decode()
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.resolution["outcome"] == "done"
    entry = AuditLogEntry.objects.get(event_type="unknown_outcome_confirmed")
    assert entry.actor_id == editor.pk and entry.details["outcome"] == "done"
    assert entry.details["comment"] == "in the log"
    execution = Execution.objects.get(pk=approval.execution_id)
    assert execution.status == Execution.Status.QUEUED
    assert queued.called
    step = execution.steps.order_by("step_number").last()
    assert step.output["resolution"]["outcome"] == "done" and step.call_id == "c1"


def test_the_requester_and_a_non_approver_see_no_buttons_and_are_refused(workspace, owner, member):
    approval = paused(workspace, owner)
    mine = browser(owner).get(f"/approvals/{approval.pk}/").content.decode()
    assert "another approver must answer" in mine and 'value="done"' not in mine
    refused = browser(owner).post(f"/approvals/{approval.pk}/confirm-outcome", {"outcome": "done"}, **HTMX)
    assert refused.status_code == 403
    assert (
        browser(member).post(f"/approvals/{approval.pk}/confirm-outcome", {"outcome": "done"}, **HTMX).status_code
        == 403
    )
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_an_outsider_gets_404(workspace, owner, outsider):
    approval = paused(workspace, owner)
    assert browser(outsider).get(f"/approvals/{approval.pk}/").status_code == 404
    assert (
        browser(outsider).post(f"/approvals/{approval.pk}/confirm-outcome", {"outcome": "done"}, **HTMX).status_code
        == 404
    )


@pytest.mark.parametrize(
    "body", [{"outcome": "maybe"}, {}, {"outcome": "done", "resolution_comment": "x" * 4001}, {"outcome": "done\x00"}]
)
def test_a_bad_form_is_a_400_inside_the_card(workspace, owner, editor, body):
    approval = paused(workspace, owner)
    answer = browser(editor).post(f"/approvals/{approval.pk}/confirm-outcome", body, **HTMX)
    assert answer.status_code == 400
    assert "the form has errors" in answer.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_the_approve_form_does_not_answer_it(workspace, owner, editor):
    approval = paused(workspace, owner)
    answer = browser(editor).post(f"/approvals/{approval.pk}/resolve", {"decision": "approved"}, **HTMX)
    assert answer.status_code == 409 and "done or not_done" in answer.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"

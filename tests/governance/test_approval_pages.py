"""The approvals inbox, the approval card's htmx endpoint and the run page."""

from __future__ import annotations

from unittest import mock

import pytest
from django.test import Client

from executions import services, tasks
from executions.models import Execution
from governance.models import ApprovalRequest, AuditLogEntry
from tests.factories import ScriptedLLM, make_agent, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL

pytestmark = pytest.mark.django_db

PROPOSED = {"ticket_id": 7, "amount": 40.0}
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _clean_calls():
    approval_tools.reset()


@pytest.fixture
def paused(workspace, owner):
    agent = make_agent(
        workspace=workspace, owner=owner, name="Refunder", tools=[WRITE_TOOL], action_level="act_with_approval",
        require_approval_for=[WRITE_TOOL], approver_roles=["admin"],
    )
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="Refund ticket 7"))
    services.execution_run_segment(
        execution_id=execution.pk, llm=ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund")])
    )
    return ApprovalRequest.objects.get(execution_id=execution.pk)


def browser(user) -> Client:
    client = Client(enforce_csrf_checks=False)
    client.force_login(user)
    return client


def resolve_url(approval) -> str:
    return f"/approvals/{approval.pk}/resolve"


def test_pages_require_a_signed_in_user(paused):
    client = Client()
    for url in ("/approvals/", f"/approvals/{paused.pk}/", f"/runs/{paused.execution_id}/"):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert client.post(resolve_url(paused), {"decision": "approved"}).status_code == 302
    assert ApprovalRequest.objects.get(pk=paused.pk).status == ApprovalRequest.Status.PENDING


def test_inbox_lists_the_pending_request_for_an_approver(paused, owner):
    response = browser(owner).get("/approvals/")

    assert response.status_code == 200
    html = response.content.decode()
    assert f'id="approval-{paused.pk}"' in html
    assert WRITE_TOOL in html
    assert "&quot;amount&quot;: 40.0" in html  # the pretty-printed proposed payload
    assert f'data-expires-at="{paused.expires_at.isoformat()}"' in html  # the countdown's target
    assert f'hx-post="/approvals/{paused.pk}/resolve"' in html
    assert "data-json-editor" in html and "Reject" in html


def test_inbox_hides_the_request_from_outsiders_and_non_approvers(paused, outsider, editor):
    assert f"approval-{paused.pk}" not in browser(outsider).get("/approvals/").content.decode()
    # The editor belongs to the workspace, but only admins approve this agent's calls.
    assert f"approval-{paused.pk}" not in browser(editor).get("/approvals/").content.decode()


def test_outsider_gets_404_for_the_card_the_endpoint_and_the_run(paused, outsider):
    client = browser(outsider)

    assert client.get(f"/approvals/{paused.pk}/").status_code == 404
    assert client.post(resolve_url(paused), {"decision": "approved"}, **HTMX).status_code == 404
    assert client.get(f"/runs/{paused.execution_id}/").status_code == 404
    assert ApprovalRequest.objects.get(pk=paused.pk).status == ApprovalRequest.Status.PENDING


def test_approving_through_the_card_resolves_and_requeues(paused, owner, django_capture_on_commit_callbacks):
    with mock.patch.object(tasks.run_segment, "delay") as delay, django_capture_on_commit_callbacks(execute=True):
        response = browser(owner).post(resolve_url(paused), {"decision": "approved"}, **HTMX)

    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html  # the card alone, for htmx to swap
    assert f'id="approval-{paused.pk}"' in html and "approval-approved" in html
    assert "by owner" in html and 'name="decision"' not in html  # resolved: no more buttons
    paused.refresh_from_db()
    assert paused.status == ApprovalRequest.Status.APPROVED and paused.resolved_by == owner
    delay.assert_called_once_with(paused.execution_id)
    assert Execution.objects.get(pk=paused.execution_id).status == Execution.Status.QUEUED
    inbox = browser(owner).get("/approvals/").content.decode()
    assert f'id="approval-{paused.pk}"' not in inbox  # no longer waiting
    assert f'href="/approvals/{paused.pk}/"' in inbox and "Approved" in inbox  # listed as recently resolved


def test_reject_with_comment_through_the_card(paused, owner):
    with mock.patch.object(tasks.run_segment, "delay"):
        response = browser(owner).post(
            resolve_url(paused), {"decision": "rejected", "resolution_comment": "Not this week."}, **HTMX
        )

    assert response.status_code == 200
    assert "Not this week." in response.content.decode()
    paused.refresh_from_db()
    assert paused.status == ApprovalRequest.Status.REJECTED and paused.resolution_comment == "Not this week."


def test_edit_and_approve_through_the_card(paused, owner):
    edited = '{"ticket_id": 7, "amount": 12.5}'
    with mock.patch.object(tasks.run_segment, "delay"):
        response = browser(owner).post(
            resolve_url(paused), {"decision": "edited_approved", "modified_args": edited}, **HTMX
        )

    assert response.status_code == 200
    paused.refresh_from_db()
    assert paused.status == ApprovalRequest.Status.EDITED
    assert paused.resolution["modified_args"] == {"ticket_id": 7, "amount": 12.5, "note": ""}
    assert "12.5" in response.content.decode()


def test_invalid_json_in_the_editor_shows_an_error_and_changes_nothing(paused, owner):
    with mock.patch.object(tasks.run_segment, "delay") as delay:
        response = browser(owner).post(
            resolve_url(paused), {"decision": "edited_approved", "modified_args": '{"ticket_id": 7, amount: }'},
            **HTMX,
        )

    assert response.status_code == 400
    assert response["X-River-Card"] == "1"
    html = response.content.decode()
    assert 'role="alert"' in html and "Not valid JSON" in html and "line 1, column 18" in html
    assert "amount: }" in html  # the user's text is kept in the editor
    paused.refresh_from_db()
    assert paused.status == ApprovalRequest.Status.PENDING
    assert not AuditLogEntry.objects.filter(approval_id=paused.pk).exclude(event_type="approval_requested").exists()
    delay.assert_not_called()


def test_edit_outside_the_tool_schema_is_refused_inside_the_card(paused, owner):
    response = browser(owner).post(
        resolve_url(paused), {"decision": "edited_approved", "modified_args": '{"ticket_id": 7, "amount": -3}'},
        **HTMX,
    )

    assert response.status_code == 400
    assert "modified_args.amount" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=paused.pk).status == ApprovalRequest.Status.PENDING


def test_non_approver_sees_the_card_without_buttons_and_gets_403_inside_it(paused, editor):
    client = browser(editor)
    page = client.get(f"/approvals/{paused.pk}/").content.decode()
    assert "Your role may not resolve it" in page and 'name="decision"' not in page

    response = client.post(resolve_url(paused), {"decision": "approved"}, **HTMX)

    assert response.status_code == 403
    assert "may not resolve" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=paused.pk).status == ApprovalRequest.Status.PENDING


def test_second_decision_renders_409_in_the_card(paused, owner, org_admin):
    with mock.patch.object(tasks.run_segment, "delay"):
        assert browser(owner).post(resolve_url(paused), {"decision": "approved"}, **HTMX).status_code == 200
        late = browser(org_admin).post(resolve_url(paused), {"decision": "rejected"}, **HTMX)

    assert late.status_code == 409
    html = late.content.decode()
    assert "already approved" in html and "approval-approved" in html


def test_plain_form_post_without_htmx_renders_the_full_page(paused, owner):
    with mock.patch.object(tasks.run_segment, "delay"):
        response = browser(owner).post(resolve_url(paused), {"decision": "approved"})

    assert response.status_code == 200
    assert "<html" in response.content.decode()


def test_run_page_shows_status_steps_and_the_card(paused, owner):
    response = browser(owner).get(f"/runs/{paused.execution_id}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "Awaiting approval" in html
    # The activity feed is rendered by static/run.js from the events the page embeds.
    assert '"type": "approval_required"' in html and f'"approval_id": "{paused.pk}"' in html
    assert f'id="approval-{paused.pk}"' in html

"""The approval card under a quorum and an escalation chain (issue 29 §3): "1 of 2
approvals" and who approved, no buttons for who already approved, the round the card
showed travels with the click, and the chain's next step and expiry."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.test import Client

from executions import tasks
from governance.models import ApprovalRequest
from tests.governance.test_approval_quorum import pause, quorum_agent

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_card_counts_approvals_and_hides_the_buttons_from_who_approved(workspace, owner, editor):
    agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}])
    _, approval = pause(agent)
    page = browser(editor).get(f"/approvals/{approval.pk}/").content.decode()
    assert "0 of 2 approvals" in page and 'name="arguments_round" value="0"' in page

    answer = browser(editor).post(f"/approvals/{approval.pk}/resolve", {"decision": "approved",
                                                                       "arguments_round": "0"}, **HTMX)

    assert answer.status_code == 200
    card = answer.content.decode()
    assert "1 of 2 approvals" in card and "Approved by editor" in card
    assert "You approved this request; it waits for 1 more approver" in card
    assert 'value="approved"' not in card  # no Approve button for them
    other = browser(owner).get(f"/approvals/{approval.pk}/").content.decode()
    assert "1 of 2 approvals" in other and 'value="approved"' in other
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalRequest.Status.PENDING


def test_a_click_on_arguments_edited_since_is_refused_inside_the_card(workspace, owner, editor):
    agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}])
    _, approval = pause(agent)
    edited = '{"ticket_id": 7, "amount": 12.5}'
    assert browser(owner).post(f"/approvals/{approval.pk}/resolve", {
        "decision": "edited_approved", "modified_args": edited, "arguments_round": "0"}, **HTMX).status_code == 200

    stale = browser(editor).post(f"/approvals/{approval.pk}/resolve", {"decision": "approved",
                                                                      "arguments_round": "0"}, **HTMX)

    assert stale.status_code == 409
    card = stale.content.decode()
    assert "Someone edited the arguments" in card and "12.5" in card
    assert 'name="arguments_round" value="1"' in card  # the fresh card carries the new round
    with mock.patch.object(tasks.run_segment, "delay"):
        done = browser(editor).post(f"/approvals/{approval.pk}/resolve", {"decision": "approved",
                                                                         "arguments_round": "1"}, **HTMX)
    assert done.status_code == 200
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.EDITED
    assert approval.resolution["modified_args"]["amount"] == 12.5


def test_a_bad_round_is_a_form_error(workspace, owner, editor):
    agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}])
    _, approval = pause(agent)
    answer = browser(editor).post(f"/approvals/{approval.pk}/resolve", {"decision": "approved",
                                                                       "arguments_round": "-3"}, **HTMX)
    assert answer.status_code == 400 and "arguments_round" in answer.content.decode()
    assert not approval.votes.exists()


def test_the_card_shows_the_escalation_chain(workspace, owner, editor):
    agent = quorum_agent(workspace, owner, approver_roles=("editor",), timeout=120,
                         escalation=[{"after_minutes": 30, "approver_roles": ["admin"]}])
    _, approval = pause(agent)
    page = browser(owner).get(f"/approvals/{approval.pk}/").content.decode()
    assert "Waiting for editor; escalates to admin at" in page and "expires" in page

    ApprovalRequest.objects.filter(pk=approval.pk).update(
        approver_roles=["admin"], escalation_level=1, escalated_at=approval.created_at + timedelta(minutes=30),
        next_escalation_at=None)
    page = browser(owner).get(f"/approvals/{approval.pk}/").content.decode()
    assert "Escalated to <strong>admin</strong> at" in page

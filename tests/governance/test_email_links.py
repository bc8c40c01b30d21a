"""Deciding from e-mail: signed, single-use links to a confirm page (issue 29 §4).

The link identifies (approval, recipient, decision); sign-in, role, the requester rule
and exactly-once are the card's and the API's checks. A GET never decides."""

from __future__ import annotations

import re
import time
from unittest import mock

import pytest
from django.core import mail
from django.test import Client

from executions import tasks
from governance.email_links import approval_link_token
from governance.models import ApprovalLinkUse, ApprovalRequest, AuditLogEntry, WorkspaceSettings
from governance.notifications import EMAIL, approval_channel_deliver
from tests.governance import approval_tools
from tests.governance.channel_support import pause_run, requester_as_approver

pytestmark = pytest.mark.django_db
PENDING = ApprovalRequest.Status.PENDING


@pytest.fixture(autouse=True)
def _no_resume_sent():
    approval_tools.reset()
    with mock.patch.object(tasks.run_segment, "delay"):
        yield


@pytest.fixture
def paused(workspace, owner):
    return pause_run(workspace=workspace, owner=owner)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def link(approval, user, decision="approved") -> str:
    return f"/approvals/link/{approval_link_token(approval_id=approval.pk, user_id=user.pk, decision=decision)}"


def decisions(approval) -> list[AuditLogEntry]:
    return list(AuditLogEntry.objects.filter(approval_id=approval.pk).exclude(event_type="approval_requested"))


def test_recipients_who_may_decide_get_their_own_links(paused, workspace, owner):
    requester = approval_tools.requester_in(workspace)
    requester.email = "requester@example.com"
    requester.save()
    WorkspaceSettings.objects.update_or_create(workspace=workspace, defaults={"approval_notification_config": {
        "email": {"enabled": True, "recipients": [owner.email.upper(), "ops@example.com", requester.email]}}})

    assert approval_channel_deliver(approval_id=paused.pk, channel=EMAIL) is True

    by_address = {message.to[0].lower(): message.body for message in mail.outbox}
    assert set(by_address) == {"owner@example.com", "ops@example.com", "requester@example.com"}
    links = re.findall(r"(?:Approve|Reject): (\S+)", by_address["owner@example.com"])
    assert len(links) == 2 and all(url.startswith("/approvals/link/") for url in links)
    # Not a person who may decide (an alias; the run's own requester): the review link only.
    for address in ("ops@example.com", "requester@example.com"):
        assert "/approvals/link/" not in by_address[address]
        assert f"/approvals/{paused.pk}/" in by_address[address]
    # The links from the e-mail work: the approve link's page offers to approve.
    page = signed_in(owner).get(links[0])
    assert page.status_code == 200 and "Confirm: approve" in page.content.decode()


def test_opening_a_link_never_decides(paused, owner):
    client = signed_in(owner)
    for _ in range(2):
        response = client.get(link(paused, owner))
        assert response.status_code == 200
    html = response.content.decode()
    assert "Confirm: approve" in html and str(paused.tool_name) in html
    assert response["Referrer-Policy"] == "same-origin" and "no-store" in response["Cache-Control"]
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING
    assert decisions(paused) == [] and not ApprovalLinkUse.objects.exists()


def test_posting_the_link_decides_once_and_the_audit_names_email(paused, owner):
    url = link(paused, owner, "rejected")
    response = signed_in(owner).post(url, {"resolution_comment": "not this one"})

    assert response.status_code == 200
    decided = ApprovalRequest.objects.get(pk=paused.pk)
    assert decided.status == ApprovalRequest.Status.REJECTED and decided.resolved_by == owner
    assert decided.resolution_comment == "not this one"
    [entry] = decisions(paused)
    assert entry.event_type == "approval_rejected" and entry.details["channel"] == "email"
    assert entry.actor_id == owner.pk
    # Used: a second POST or GET of the same link is refused, and says why.
    again = signed_in(owner).post(url, {})
    assert again.status_code == 410 and "already used" in again.content.decode()
    assert signed_in(owner).get(url).status_code == 410
    assert len(decisions(paused)) == 1


def test_an_expired_link_is_refused(paused, owner, settings):
    settings.RIVER_APPROVAL_LINK_HOURS = 1
    with mock.patch("django.core.signing.time.time", return_value=time.time() - 2 * 3600):
        url = link(paused, owner)
    for response in (signed_in(owner).get(url), signed_in(owner).post(url, {})):
        assert response.status_code == 410
        assert "expired" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING


@pytest.mark.parametrize("damage", [
    lambda token: token[:-1] + ("A" if token[-1] != "A" else "B"),  # the signature
    lambda token: ("x" if token[0] != "x" else "y") + token[1:],  # the content
    lambda token: "not-a-token",
    lambda token: token.split(":")[0],
])
def test_a_tampered_link_is_refused_with_400(paused, owner, damage):
    token = approval_link_token(approval_id=paused.pk, user_id=owner.pk, decision="approved")
    url = f"/approvals/link/{damage(token)}"
    for response in (signed_in(owner).get(url), signed_in(owner).post(url, {})):
        assert response.status_code == 400
        assert "not valid" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING


def test_an_overlong_token_is_a_400_not_a_500(owner):
    assert signed_in(owner).get(f"/approvals/link/{'a' * 5000}").status_code == 400


def test_someone_elses_link_does_not_decide(paused, owner, org_admin):
    # The org admin may approve this request, but the link was sent to the owner.
    url = link(paused, owner)
    for response in (signed_in(org_admin).get(url), signed_in(org_admin).post(url, {})):
        assert response.status_code == 403
        assert "someone else" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING


def test_a_link_for_the_runs_requester_cannot_approve(paused, workspace):
    requester = requester_as_approver(workspace)
    url = link(paused, requester)  # never e-mailed to them, but forged links get no further
    for response in (signed_in(requester).get(url), signed_in(requester).post(url, {})):
        assert response.status_code == 403
        assert "segregation of duties" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING
    assert not ApprovalLinkUse.objects.exists()


def test_a_role_that_may_not_approve_gets_403(paused, editor):
    url = link(paused, editor)  # this agent's approvers are admins
    assert signed_in(editor).post(url, {}).status_code == 403
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING


def test_an_outsider_gets_404(paused, outsider):
    url = link(paused, outsider)
    for response in (signed_in(outsider).get(url), signed_in(outsider).post(url, {})):
        assert response.status_code == 404
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING


def test_the_link_needs_a_signed_in_user(paused, owner):
    url = link(paused, owner)
    for response in (Client().get(url), Client().post(url, {})):
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING


def test_a_request_decided_elsewhere_first_gets_409(paused, owner, org_admin, api_client_for):
    url = link(paused, owner)
    page = signed_in(owner).get(url)
    assert page.status_code == 200
    won = api_client_for(org_admin).post(f"/api/v1/approvals/{paused.pk}/resolve", {"status": "rejected"},
                                         format="json")
    assert won.status_code == 200

    lost = signed_in(owner).post(url, {})
    assert lost.status_code == 409
    assert "Already decided" in lost.content.decode()
    assert ApprovalRequest.objects.get(pk=paused.pk).status == ApprovalRequest.Status.REJECTED
    [entry] = decisions(paused)
    assert entry.details["channel"] == "api"


def test_a_hostile_comment_is_a_form_error(paused, owner):
    response = signed_in(owner).post(link(paused, owner), {"resolution_comment": "x" * 5000})
    assert response.status_code == 400
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING
    assert not ApprovalLinkUse.objects.exists()


def test_the_inbox_card_names_its_channel(paused, owner):
    response = signed_in(owner).post(f"/approvals/{paused.pk}/resolve", {"decision": "approved"})
    assert response.status_code == 200
    [entry] = decisions(paused)
    assert entry.details["channel"] == "inbox"

"""Deciding from Slack (issue 29 §4): buttons on the approval message, interactions
verified by Slack's request signing, Slack users mapped to River users only through a
verified link, the message updated through a (fake, local) response_url."""

from __future__ import annotations

import time
from unittest import mock

import pytest
from django.test import Client, TestCase

from executions import tasks
from governance import tasks as governance_tasks
from governance.models import ApprovalRequest, AuditLogEntry, SlackIdentity, SlackLinkCode, WorkspaceSettings
from governance.notifications import SLACK, NotificationError, approval_channel_deliver
from governance.slack import slack_link_start
from tests.governance import approval_tools
from tests.governance.channel_support import (
    SIGNING_SECRET,
    command_body,
    fake_slack,
    interaction_body,
    pause_run,
    requester_as_approver,
    slack_signed,
)

pytestmark = pytest.mark.django_db
PENDING = ApprovalRequest.Status.PENDING
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def slack(settings):
    with fake_slack() as fake:
        settings.RIVER_SLACK_SIGNING_SECRET = SIGNING_SECRET
        settings.RIVER_SLACK_RESPONSE_URL_PREFIXES = [fake.url + "/"]
        yield fake


@pytest.fixture(autouse=True)
def _tasks_inline():
    """Resumes are not sent; the Slack answer task runs in this process (see ``post``)."""
    approval_tools.reset()

    def respond(*args, **kwargs):
        governance_tasks.slack_respond.apply(args=args, kwargs=kwargs, throw=True)

    with mock.patch.object(tasks.run_segment, "delay"), \
            mock.patch.object(governance_tasks.slack_respond, "delay", respond):
        yield


@pytest.fixture
def paused(workspace, owner):
    return pause_run(workspace=workspace, owner=owner)


def linked(user, *, team="T0001", slack_user="U0001") -> SlackIdentity:
    return SlackIdentity.objects.create(user=user, team_id=team, slack_user_id=slack_user, slack_user_name="dana")


def post(path: str, body: bytes, headers: dict[str, str]):
    """POST as Slack does; what the view queues on commit runs when it returns (the test's
    transaction never commits)."""
    extra = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
    with TestCase.captureOnCommitCallbacks(execute=True):
        return Client().post(path, data=body, content_type=FORM, **extra)


def click(slack, approval, action="river_approve", **kwargs):
    body = interaction_body(approval_id=approval.pk, action_id=action, response_url=f"{slack.url}/respond/1",
                            **kwargs)
    return post("/integrations/slack/interactions", body, slack_signed(body))


def decisions(approval) -> list[AuditLogEntry]:
    return list(AuditLogEntry.objects.filter(approval_id=approval.pk).exclude(event_type="approval_requested"))


def test_the_approval_message_carries_approve_and_reject_buttons(paused, workspace, slack):
    WorkspaceSettings.objects.update_or_create(workspace=workspace, defaults={"approval_notification_config": {
        "slack": {"enabled": True, "webhook_url": f"{slack.url}/webhook"}}})

    assert approval_channel_deliver(approval_id=paused.pk, channel=SLACK) is True

    [message] = slack.received("/webhook")
    buttons = [element for block in message["blocks"] if block["type"] == "actions" for element in block["elements"]]
    assert [(b["action_id"], b["value"]) for b in buttons] == [("river_approve", str(paused.pk)),
                                                            ("river_reject", str(paused.pk))]
    assert "Approval needed" in message["text"]


def test_slack_down_never_loses_the_request(paused, workspace, owner):
    WorkspaceSettings.objects.update_or_create(workspace=workspace, defaults={"approval_notification_config": {
        "slack": {"enabled": True, "webhook_url": "http://127.0.0.1:9/webhook"}}})  # nothing listens there

    with pytest.raises(NotificationError):  # the delivery task retries
        approval_channel_deliver(approval_id=paused.pk, channel=SLACK)

    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING
    client = Client()
    client.force_login(owner)
    assert f'id="approval-{paused.pk}"' in client.get("/approvals/").content.decode()


def test_a_linked_user_decides_and_the_message_shows_who(paused, owner, slack):
    linked(owner)

    response = click(slack, paused)

    assert response.status_code == 200
    decided = ApprovalRequest.objects.get(pk=paused.pk)
    assert decided.status == ApprovalRequest.Status.APPROVED and decided.resolved_by == owner
    [entry] = decisions(paused)
    assert entry.event_type == "approval_approved" and entry.details["channel"] == "slack"
    [update] = slack.received("/respond/1")
    assert update["replace_original"] is True
    assert "Approved by owner" in update["text"] and "via slack" in update["text"]
    assert "actions" not in [block["type"] for block in update["blocks"]]  # no buttons left


def test_reject_button_rejects(paused, owner, slack):
    linked(owner)
    assert click(slack, paused, action="river_reject").status_code == 200
    assert ApprovalRequest.objects.get(pk=paused.pk).status == ApprovalRequest.Status.REJECTED


def test_a_bad_signature_is_refused(paused, owner, slack):
    linked(owner)
    body = interaction_body(approval_id=paused.pk, action_id="river_approve", response_url=f"{slack.url}/r")
    for headers in (slack_signed(body, secret="not-the-secret"), {},
                    {**slack_signed(body), "X-Slack-Signature": "v0=" + "0" * 64},
                    {**slack_signed(body), "X-Slack-Request-Timestamp": "soon"}):
        assert post("/integrations/slack/interactions", body, headers).status_code == 401
    # A body changed after signing.
    other = interaction_body(approval_id=paused.pk, action_id="river_reject", response_url=f"{slack.url}/r")
    assert post("/integrations/slack/interactions", other, slack_signed(body)).status_code == 401
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING
    assert slack.received() == []


@pytest.mark.parametrize("skew", [-330, 330, -3600])
def test_an_old_or_future_timestamp_is_refused(paused, owner, slack, skew):
    linked(owner)
    body = interaction_body(approval_id=paused.pk, action_id="river_approve", response_url=f"{slack.url}/r")
    response = post("/integrations/slack/interactions", body, slack_signed(body, timestamp=int(time.time()) + skew))
    assert response.status_code == 401 and response.json()["error"]["code"] == "slack_request_stale"
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING


def test_without_a_signing_secret_the_endpoints_answer_503(paused, settings):
    settings.RIVER_SLACK_SIGNING_SECRET = ""
    body = interaction_body(approval_id=paused.pk, action_id="river_approve", response_url="https://hooks.slack.com/x")
    assert post("/integrations/slack/interactions", body, slack_signed(body)).status_code == 503


def test_an_unlinked_slack_user_decides_nothing_and_is_told_how_to_link(paused, owner, slack):
    linked(owner, slack_user="U0001")

    assert click(slack, paused, user="U9999").status_code == 200

    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING
    assert decisions(paused) == []
    [answer] = slack.received("/respond/1")
    assert answer["response_type"] == "ephemeral" and answer["replace_original"] is False
    assert "not linked" in answer["text"] and "/river link" in answer["text"]


def test_the_same_slack_user_id_in_another_team_is_not_linked(paused, owner, slack):
    linked(owner, team="T0001")
    assert click(slack, paused, team="T0BAD").status_code == 200
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING


def test_a_linked_requester_cannot_approve_their_own_run(paused, workspace, slack):
    linked(requester_as_approver(workspace))
    click(slack, paused)
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING
    [answer] = slack.received("/respond/1")
    assert answer["response_type"] == "ephemeral" and "segregation of duties" in answer["text"]


def test_a_linked_outsider_gets_not_found(paused, outsider, slack):
    linked(outsider)
    click(slack, paused)
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING
    [answer] = slack.received("/respond/1")
    assert "not found" in answer["text"]


def test_a_click_after_another_channel_decided_shows_that_decision(paused, owner, org_admin, slack,
                                                                   api_client_for):
    linked(owner)
    assert api_client_for(org_admin).post(f"/api/v1/approvals/{paused.pk}/resolve", {"status": "rejected"},
                                          format="json").status_code == 200

    click(slack, paused)

    assert ApprovalRequest.objects.get(pk=paused.pk).status == ApprovalRequest.Status.REJECTED
    assert len(decisions(paused)) == 1
    [update] = slack.received("/respond/1")
    assert update["replace_original"] is True and "Rejected by orgadmin" in update["text"]
    assert "via api" in update["text"]


def test_a_response_url_outside_slack_is_never_contacted(paused, owner, slack):
    linked(owner)
    body = interaction_body(approval_id=paused.pk, action_id="river_approve",
                            response_url="http://127.0.0.1:1/elsewhere")
    assert post("/integrations/slack/interactions", body, slack_signed(body)).status_code == 200
    assert ApprovalRequest.objects.get(pk=paused.pk).status == PENDING  # a click River cannot answer: ignored


def test_a_malformed_payload_is_a_400(slack):
    for body in (b"payload=not-json", b"payload=%7B%7D", b"nothing=here", b"payload=%5B1%5D"):
        assert post("/integrations/slack/interactions", body, slack_signed(body)).status_code == 400


# --- linking -----------------------------------------------------------------------------------


def test_linking_with_a_code_from_river(owner, slack):
    page = Client()
    page.force_login(owner)
    shown = page.post("/settings/slack", {"action": "start"})
    assert shown.status_code == 200
    code = shown.context["code"]
    assert code and code in shown.content.decode()
    assert SlackLinkCode.objects.get(user=owner).code_hash != code  # kept as a hash

    body = command_body(text=f"link {code.lower()}", team="T0001", user="U0042")
    answer = post("/integrations/slack/commands", body, slack_signed(body))

    assert answer.status_code == 200 and "Linked" in answer.json()["text"]
    identity = SlackIdentity.objects.get(user=owner)
    assert (identity.team_id, identity.slack_user_id) == ("T0001", "U0042")
    assert "Linked to Slack user <code>dana</code>" in page.get("/settings/slack").content.decode()
    # Used once: the same code links nobody else.
    again = command_body(text=f"link {code}", team="T0001", user="U0666")
    assert "unknown, used or expired" in post("/integrations/slack/commands", again, slack_signed(again)).json()["text"]
    assert not SlackIdentity.objects.filter(slack_user_id="U0666").exists()


def test_a_wrong_or_expired_code_links_nothing(owner, slack):
    code, row = slack_link_start(user=owner)
    wrong = command_body(text="link ABCDE-FGHJK")
    assert "unknown" in post("/integrations/slack/commands", wrong, slack_signed(wrong)).json()["text"]
    SlackLinkCode.objects.filter(pk=row.pk).update(expires_at=row.created_at)
    late = command_body(text=f"link {code}")
    assert "expired" in post("/integrations/slack/commands", late, slack_signed(late)).json()["text"]
    assert not SlackIdentity.objects.exists()


def test_an_unsigned_link_command_is_refused(owner, slack):
    code, _ = slack_link_start(user=owner)
    body = command_body(text=f"link {code}")
    assert post("/integrations/slack/commands", body, slack_signed(body, secret="guess")).status_code == 401
    assert not SlackIdentity.objects.exists()


def test_unlink_from_river(owner):
    linked(owner)
    page = Client()
    page.force_login(owner)
    assert page.post("/settings/slack", {"action": "unlink"}).status_code == 302
    assert not SlackIdentity.objects.exists()
    assert page.post("/settings/slack", {"action": "bogus"}).status_code == 400
    assert Client().post("/settings/slack", {"action": "start"}).status_code == 302  # sign-in first
    assert not SlackLinkCode.objects.exists()

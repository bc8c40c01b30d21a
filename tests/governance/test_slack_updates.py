"""A Slack approval message follows a request decided elsewhere (issue 29 §4).

A click that did not decide (an unlinked Slack user, a quorum vote) leaves its
response_url with River; when the request is then decided in the inbox, by an e-mail
link, over the API, or expires, the message is replaced with the outcome and who decided,
after commit, by a retried task. A fake Slack (a local HTTP server on 127.0.0.1) records
what River posts; Slack down delays the update and never the decision."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.test import Client, TestCase
from django.utils import timezone

from executions import tasks
from governance import tasks as governance_tasks
from governance.email_links import approval_link_token
from governance.models import ApprovalRequest, AuditLogEntry, SlackApprovalMessage, SlackIdentity
from governance.notifications import NotificationError
from governance.resolution import approvals_expire_due
from governance.slack_updates import RESPONSE_URL_MINUTES, slack_messages_update
from tests.governance import approval_tools
from tests.governance.channel_support import SIGNING_SECRET, fake_slack, interaction_body, pause_run, slack_signed

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
    """Resumes are not sent; the Slack tasks run in this process, as a worker would run them
    (``apply``: Celery's retry machinery included, each attempt recorded)."""
    approval_tools.reset()
    sent: list[tuple] = []

    def respond(*args, **kwargs):
        governance_tasks.slack_respond.apply(args=args, kwargs=kwargs, throw=True)

    def update(*args, **kwargs):
        sent.append(args)
        governance_tasks.slack_update_decided.apply(args=args, kwargs=kwargs)

    with (
        mock.patch.object(tasks.run_segment, "delay"),
        mock.patch.object(governance_tasks.slack_respond, "delay", respond),
        mock.patch.object(governance_tasks.slack_update_decided, "delay", update),
    ):
        yield sent


@pytest.fixture
def paused(workspace, owner):
    return pause_run(workspace=workspace, owner=owner)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def committed(call):
    """Run ``call`` and then what it queued on commit (the test's transaction never commits)."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        return call()


def unlinked_click(slack, approval, *, path="/respond/1", user="U9999"):
    body = interaction_body(
        approval_id=approval.pk, action_id="river_approve", response_url=f"{slack.url}{path}", user=user
    )
    extra = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in slack_signed(body).items()}
    response = committed(
        lambda: Client().post("/integrations/slack/interactions", data=body, content_type=FORM, **extra)
    )
    assert response.status_code == 200
    assert ApprovalRequest.objects.get(pk=approval.pk).status == PENDING
    return response


def replaced(slack, path="/respond/1") -> list[dict]:
    return [body for body in slack.received(path) if body.get("replace_original") is True]


def test_a_click_that_did_not_decide_is_remembered_encrypted(paused, slack):
    unlinked_click(slack, paused)

    [row] = SlackApprovalMessage.objects.filter(approval=paused)
    assert slack.url not in row.response_url_encrypted  # kept encrypted: it lets its holder post to the channel
    assert row.updated_at is None and row.expires_at > timezone.now() + timedelta(minutes=RESPONSE_URL_MINUTES - 1)
    [answer] = slack.received("/respond/1")
    assert answer["response_type"] == "ephemeral"  # the clicker is told; the message keeps its buttons


def test_decided_in_the_inbox_the_message_shows_the_decision_and_who(paused, owner, slack, _tasks_inline):
    unlinked_click(slack, paused)

    response = committed(lambda: signed_in(owner).post(f"/approvals/{paused.pk}/resolve", {"decision": "approved"}))

    assert response.status_code == 200
    [update] = replaced(slack)
    assert "Approved by owner" in update["text"] and "(via inbox)" in update["text"]
    assert [block["type"] for block in update["blocks"]] == ["section"]  # the buttons are gone
    assert SlackApprovalMessage.objects.get(approval=paused).updated_at is not None
    assert _tasks_inline == [(str(paused.pk),)]  # one task for the decision


def test_decided_by_an_email_link(paused, owner, slack):
    unlinked_click(slack, paused)
    url = f"/approvals/link/{approval_link_token(approval_id=paused.pk, user_id=owner.pk, decision='rejected')}"

    assert committed(lambda: signed_in(owner).post(url, {"resolution_comment": "no"})).status_code == 200

    [update] = replaced(slack)
    assert "Rejected by owner" in update["text"] and "(via email)" in update["text"]


def test_decided_over_the_api(paused, org_admin, slack, api_client_for):
    unlinked_click(slack, paused)

    response = committed(
        lambda: api_client_for(org_admin).post(
            f"/api/v1/approvals/{paused.pk}/resolve", {"status": "approved"}, format="json"
        )
    )

    assert response.status_code == 200
    [update] = replaced(slack)
    assert "Approved by orgadmin" in update["text"] and "(via api)" in update["text"]


def test_an_expired_request_says_so(paused, slack):
    unlinked_click(slack, paused)
    ApprovalRequest.objects.filter(pk=paused.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert committed(approvals_expire_due) == 1

    [update] = replaced(slack)
    assert "Expired without a decision" in update["text"]


def test_every_remembered_message_is_updated_once(paused, owner, slack, _tasks_inline):
    unlinked_click(slack, paused, path="/respond/1")
    unlinked_click(slack, paused, path="/respond/2", user="U8888")  # the reminder's message, another person
    unlinked_click(slack, paused, path="/respond/1")  # the same URL again: one row

    committed(lambda: signed_in(owner).post(f"/approvals/{paused.pk}/resolve", {"decision": "approved"}))
    assert len(replaced(slack, "/respond/1")) == 1 and len(replaced(slack, "/respond/2")) == 1

    # A second delivery of the task finds them updated and posts nothing.
    assert slack_messages_update(approval_id=str(paused.pk)) == 0
    assert len(replaced(slack, "/respond/")) == 2


def test_a_decision_with_no_remembered_message_queues_nothing(paused, owner, slack, _tasks_inline):
    committed(lambda: signed_in(owner).post(f"/approvals/{paused.pk}/resolve", {"decision": "approved"}))
    assert _tasks_inline == [] and slack.received() == []


def test_a_url_older_than_slack_honours_is_left_alone(paused, owner, slack, _tasks_inline):
    unlinked_click(slack, paused)
    SlackApprovalMessage.objects.filter(approval=paused).update(expires_at=timezone.now() - timedelta(seconds=1))

    committed(lambda: signed_in(owner).post(f"/approvals/{paused.pk}/resolve", {"decision": "approved"}))

    assert _tasks_inline == [] and replaced(slack) == []


def test_a_linked_approver_under_a_quorum_is_told_their_vote_counted_and_the_message_follows(
    paused, owner, org_admin, slack
):
    ApprovalRequest.objects.filter(pk=paused.pk).update(required_approvals=2)
    SlackIdentity.objects.create(user=owner, team_id="T0001", slack_user_id="U0001", slack_user_name="dana")

    unlinked_click(slack, paused, user="U0001")  # linked: a vote, 1 of 2

    [answer] = slack.received("/respond/1")
    assert answer["response_type"] == "ephemeral" and "1 of 2 approvals" in answer["text"]
    committed(lambda: signed_in(org_admin).post(f"/approvals/{paused.pk}/resolve", {"decision": "approved"}))
    [update] = replaced(slack)
    assert "Approved by orgadmin" in update["text"] and "(via inbox)" in update["text"]


def test_slack_down_never_blocks_or_loses_the_decision_and_the_update_is_retried(paused, owner, settings):
    with fake_slack() as gone:
        settings.RIVER_SLACK_SIGNING_SECRET = SIGNING_SECRET
        settings.RIVER_SLACK_RESPONSE_URL_PREFIXES = [gone.url + "/"]
        unlinked_click(gone, paused)
    # Slack is down now: nothing listens at that address any more.

    with mock.patch.object(
        governance_tasks.slack_update_decided, "retry", side_effect=NotificationError("retry scheduled")
    ) as retry:
        response = committed(lambda: signed_in(owner).post(f"/approvals/{paused.pk}/resolve", {"decision": "approved"}))

    assert response.status_code == 200
    decided = ApprovalRequest.objects.get(pk=paused.pk)
    assert decided.status == ApprovalRequest.Status.APPROVED and decided.resolved_by == owner
    assert AuditLogEntry.objects.filter(approval_id=paused.pk, event_type="approval_approved").count() == 1
    assert retry.called  # the task asked Celery to try again later
    assert SlackApprovalMessage.objects.get(approval=paused).updated_at is None  # still to do

    # Slack is back (at the same address): the retried task updates the message.
    with fake_slack() as back:
        settings.RIVER_SLACK_RESPONSE_URL_PREFIXES = [back.url + "/"]
        row = SlackApprovalMessage.objects.get(approval=paused)
        from common.crypto import encrypt_text

        row.response_url_encrypted = encrypt_text(f"{back.url}/respond/1")
        row.save(update_fields=["response_url_encrypted"])
        assert slack_messages_update(approval_id=str(paused.pk)) == 1
        [update] = replaced(back)
        assert "Approved by owner" in update["text"]


def test_a_click_for_a_request_decided_meanwhile_is_answered_with_the_outcome(paused, owner, slack):
    committed(lambda: signed_in(owner).post(f"/approvals/{paused.pk}/resolve", {"decision": "rejected"}))
    from governance.slack_updates import slack_message_remember

    kept = committed(lambda: slack_message_remember(approval_id=str(paused.pk), response_url=f"{slack.url}/respond/9"))

    assert kept is False and not SlackApprovalMessage.objects.exists()
    [update] = replaced(slack, "/respond/9")
    assert "Rejected by owner" in update["text"]


@pytest.mark.parametrize("approval_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000", "x" * 3000])
def test_a_click_naming_no_request_is_not_remembered(slack, approval_id):
    from governance.slack_updates import slack_message_remember

    assert slack_message_remember(approval_id=approval_id, response_url=f"{slack.url}/respond/1") is False
    assert not SlackApprovalMessage.objects.exists()


def test_a_url_outside_the_allow_list_is_never_remembered(paused, slack):
    from governance.slack_updates import slack_message_remember

    assert slack_message_remember(approval_id=str(paused.pk), response_url="http://127.0.0.1:1/x") is False
    assert not SlackApprovalMessage.objects.exists()


# --- with a bot token: chat.postMessage, then chat.update whenever it is decided ---------------

BOT_TOKEN = "xoxb-test-token-0001"


class FakeSlackApi:
    """A local stand-in for Slack's Web API: records each call (method, auth header, JSON)
    and answers as Slack does, or refuses with ``fail`` (an HTTP status or an error code)."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.calls: list[tuple[str, str, dict]] = []
        self.fail: int | str | None = None
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                import json

                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with fake.lock:
                    fake.calls.append((self.path, self.headers.get("Authorization", ""), body))
                    fail = fake.fail
                if isinstance(fail, int):
                    self.send_response(fail)
                    self.end_headers()
                    return
                answer = {"ok": False, "error": fail} if fail else {"ok": True, "channel": body.get("channel"),
                                                                    "ts": f"1700000000.{len(fake.calls):06d}"}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def called(self, method: str) -> list[tuple[str, dict]]:
        with self.lock:
            return [(auth, body) for path, auth, body in self.calls if path == f"/api/{method}"]


@pytest.fixture
def slack_api(settings, workspace):
    from governance.models import WorkspaceSettings

    fake = FakeSlackApi()
    settings.RIVER_SLACK_BOT_TOKEN = BOT_TOKEN
    settings.RIVER_SLACK_API_URL = fake.url
    WorkspaceSettings.objects.update_or_create(workspace=workspace, defaults={"approval_notification_config": {
        "slack": {"enabled": True, "webhook_url": "http://127.0.0.1:9/unused", "channel_id": "C0APPROVALS"}}})
    yield fake
    fake.close()


def _posted(paused, slack_api) -> SlackApprovalMessage:
    from governance.notifications import SLACK, approval_channel_deliver

    assert approval_channel_deliver(approval_id=paused.pk, channel=SLACK) is True
    [(auth, body)] = slack_api.called("chat.postMessage")
    assert auth == f"Bearer {BOT_TOKEN}" and body["channel"] == "C0APPROVALS"
    assert [e["action_id"] for b in body["blocks"] if b["type"] == "actions" for e in b["elements"]] == [
        "river_approve", "river_reject"]
    return SlackApprovalMessage.objects.get(approval=paused)


def test_with_a_bot_token_the_posted_message_is_updated_when_decided_hours_later(paused, owner, slack_api):
    row = _posted(paused, slack_api)
    assert row.channel_id == "C0APPROVALS" and row.message_ts.startswith("1700000000.")
    SlackApprovalMessage.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(hours=5))

    response = committed(lambda: signed_in(owner).post(f"/approvals/{paused.pk}/resolve", {"decision": "approved"}))

    assert response.status_code == 200
    [(auth, update)] = slack_api.called("chat.update")
    assert auth == f"Bearer {BOT_TOKEN}"
    assert update["channel"] == "C0APPROVALS" and update["ts"] == row.message_ts
    assert "Approved by owner" in update["text"] and "(via inbox)" in update["text"]
    assert [block["type"] for block in update["blocks"]] == ["section"]
    assert SlackApprovalMessage.objects.get(pk=row.pk).updated_at is not None


def test_with_a_bot_token_an_expiry_is_shown_too(paused, slack_api):
    _posted(paused, slack_api)
    ApprovalRequest.objects.filter(pk=paused.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert committed(approvals_expire_due) == 1

    [(_, update)] = slack_api.called("chat.update")
    assert "Expired without a decision" in update["text"]


@pytest.mark.parametrize("failure", [500, "channel_not_found"])
def test_slack_api_down_or_refusing_never_blocks_the_decision(paused, owner, slack_api, failure, caplog):
    row = _posted(paused, slack_api)
    slack_api.fail = failure

    with mock.patch.object(governance_tasks.slack_update_decided, "retry",
                           side_effect=NotificationError("retry scheduled")) as retry:
        response = committed(lambda: signed_in(owner).post(f"/approvals/{paused.pk}/resolve",
                                                           {"decision": "rejected"}))

    assert response.status_code == 200
    assert ApprovalRequest.objects.get(pk=paused.pk).status == ApprovalRequest.Status.REJECTED
    assert retry.called and SlackApprovalMessage.objects.get(pk=row.pk).updated_at is None
    assert BOT_TOKEN not in caplog.text
    slack_api.fail = None  # Slack is back: the retry updates it, once
    assert slack_messages_update(approval_id=str(paused.pk)) == 1
    assert slack_messages_update(approval_id=str(paused.pk)) == 0
    assert "Rejected by owner" in slack_api.called("chat.update")[-1][1]["text"]


def test_a_message_posted_after_the_decision_is_updated_at_once(paused, owner, slack_api):
    from governance.slack_updates import slack_chat_post

    committed(lambda: signed_in(owner).post(f"/approvals/{paused.pk}/resolve", {"decision": "approved"}))

    committed(lambda: slack_chat_post(approval=paused, channel_id="C0APPROVALS", text="Approval needed",
                                      blocks=[]))

    [(_, update)] = slack_api.called("chat.update")
    assert "Approved by owner" in update["text"]


@pytest.mark.parametrize("channel_id", ["c0lower", "C0 SPACE", "<!channel>", "C" * 40])
def test_a_channel_id_that_is_not_slacks_is_refused(channel_id):
    from pydantic import ValidationError

    from rivercore.types.governance import SlackChannel

    with pytest.raises(ValidationError):
        SlackChannel(enabled=True, webhook_url="https://hooks.slack.com/x", channel_id=channel_id)


def test_without_a_bot_token_the_webhook_is_used(paused, workspace, slack, settings):
    from governance.models import WorkspaceSettings
    from governance.notifications import SLACK, approval_channel_deliver

    settings.RIVER_SLACK_BOT_TOKEN = ""
    WorkspaceSettings.objects.update_or_create(workspace=workspace, defaults={"approval_notification_config": {
        "slack": {"enabled": True, "webhook_url": f"{slack.url}/webhook", "channel_id": "C0APPROVALS"}}})

    assert approval_channel_deliver(approval_id=paused.pk, channel=SLACK) is True
    assert len(slack.received("/webhook")) == 1 and not SlackApprovalMessage.objects.exists()

"""Approval and run-outcome notifications: in-app, email, Slack (against a local HTTP server)."""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.utils import timezone

from governance.models import ApprovalRequest, Notification, WorkspaceSettings
from governance.notifications import approval_notifications_send, approval_notify, notify_run_outcome
from governance.tasks import deliver_approval_notification
from riverapp.celery import app as celery_app
from tenancy.models import Membership
from tenancy.permissions import Role

SECRET_PATH = "/services/T0001/B0002/sekrit-webhook-token"


class FakeSlack:
    """A local incoming-webhook endpoint answering with a chosen status."""

    def __init__(self, status: int):
        self.status = status
        self.bodies: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                fake.bodies.append(json.loads(self.rfile.read(length) or b"{}"))
                self.send_response(fake.status)
                self.end_headers()
                self.wfile.write(b"ok" if fake.status == 200 else b"error")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{SECRET_PATH}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slack_ok():
    fake = FakeSlack(200)
    yield fake
    fake.close()


@pytest.fixture
def slack_down():
    fake = FakeSlack(500)
    yield fake
    fake.close()


@pytest.fixture
def eager_celery():
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


def _configure(workspace, *, email=False, slack_url=None, in_app=True):
    WorkspaceSettings.objects.update_or_create(
        workspace=workspace,
        defaults={"approval_notification_config": {
            "in_app": {"enabled": in_app},
            "email": {"enabled": email, "recipients": ["approvals@example.com"] if email else []},
            "slack": {"enabled": bool(slack_url), "webhook_url": slack_url},
        }},
    )


@pytest.fixture
def approval(workspace):
    return ApprovalRequest.objects.create(
        workspace=workspace, execution_id=77, tool_name="write_back",
        proposed_payload={"data": {"status": "solved"}}, reasoning_summary="Ticket matches the refund policy.",
        risk_context="Write on tickets.", confidence_score=0.94, approver_roles=["admin", "editor"],
        expires_at=timezone.now() + timedelta(hours=24),
    )


def test_in_app_goes_to_approver_roles_and_org_admins(approval, workspace, owner, editor, member, org_admin,
                                                      outsider):
    viewer = type(owner).objects.create_user("viewer")
    Membership.objects.create(workspace=workspace, user=viewer, role=Role.VIEWER)
    _configure(workspace)
    assert approval_notifications_send(approval_id=approval.pk) == []
    recipients = set(Notification.objects.values_list("user__username", flat=True))
    assert recipients == {"owner", "editor", "orgadmin"}
    note = Notification.objects.get(user=editor)
    assert note.kind == "approval_requested" and note.url == f"/approvals/{approval.pk}/"
    assert "write_back" in note.title
    # A retried task adds nothing.
    approval_notifications_send(approval_id=approval.pk)
    assert Notification.objects.count() == 3


def test_nothing_for_a_resolved_request(approval, workspace, owner):
    _configure(workspace, email=True)
    approval.status = ApprovalRequest.Status.APPROVED
    approval.save(update_fields=["status"])
    assert approval_notifications_send(approval_id=approval.pk) == []
    assert not Notification.objects.exists()


def test_all_channels_after_commit(approval, workspace, owner, slack_ok, eager_celery,
                                   django_capture_on_commit_callbacks):
    _configure(workspace, email=True, slack_url=slack_ok.url)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        approval_notify(approval_id=approval.pk)
    assert not Notification.objects.exists()  # nothing before commit
    assert len(mail.outbox) == 0
    for callback in callbacks:
        callback()
    assert Notification.objects.filter(user=owner).count() == 1
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["approvals@example.com"]
    assert "write_back" in mail.outbox[0].subject
    assert f"/approvals/{approval.pk}/" in mail.outbox[0].body
    assert len(slack_ok.bodies) == 1
    assert "write_back" in slack_ok.bodies[0]["text"]


def test_reminder_is_a_separate_notification(approval, workspace, owner, eager_celery,
                                             django_capture_on_commit_callbacks):
    _configure(workspace)
    with django_capture_on_commit_callbacks(execute=True):
        approval_notify(approval_id=approval.pk)
        approval_notify(approval_id=approval.pk, reminder=True)
    kinds = sorted(Notification.objects.filter(user=owner).values_list("kind", flat=True))
    assert kinds == ["approval_reminder", "approval_requested"]


def test_slack_failure_is_retried_and_logged_without_the_url(approval, workspace, slack_down, caplog):
    _configure(workspace, slack_url=slack_down.url)
    with caplog.at_level("WARNING"):
        result = deliver_approval_notification.apply(args=[str(approval.pk), "slack"])
    assert result.state == "FAILURE"
    max_retries = deliver_approval_notification.max_retries
    assert len(slack_down.bodies) == max_retries + 1  # first try plus every retry
    failures = [r for r in caplog.records if "slack notification failed" in r.getMessage()]
    assert len(failures) == max_retries + 1
    assert "HTTP 500" in failures[0].getMessage()
    assert "sekrit" not in caplog.text and str(slack_down.server.server_address[1]) not in caplog.text
    assert "sekrit" not in repr(result.result)


def test_email_failure_does_not_stop_slack(approval, workspace, owner, slack_ok, eager_celery, settings,
                                          django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 1  # nothing listens
    _configure(workspace, email=True, slack_url=slack_ok.url)
    with django_capture_on_commit_callbacks(execute=True):
        approval_notify(approval_id=approval.pk)
    assert len(slack_ok.bodies) == 1
    assert Notification.objects.filter(user=owner).count() == 1
    assert len(mail.outbox) == 0


def test_run_outcome(workspace, owner, member, slack_down, caplog):
    _configure(workspace, slack_url=slack_down.url)
    with caplog.at_level("WARNING"):
        outcome = notify_run_outcome(
            workspace_id=workspace.pk, execution_id=5, agent_name="Support bot", status="failed",
            channels=["in_app", "email", "slack"], recipients=["lead@example.com"], user_ids=[member.pk],
        )
    assert outcome == {"in_app": True, "email": True, "slack": False}
    assert set(Notification.objects.values_list("user__username", flat=True)) == {"owner", "member"}
    assert mail.outbox[-1].to == ["lead@example.com"]
    assert "HTTP 500" in caplog.text and "sekrit" not in caplog.text
    assert notify_run_outcome(workspace_id=workspace.pk, execution_id=6, agent_name="Support bot",
                              status="completed", channels=["email"], recipients=["x@example.com"],
                              notify_on=["failed"]) == {}

"""The pages around notifications: the preferences page, resolved notifications shown as
such (never in the bell), times in the workspace's zone, and "Questions for you" in the
approvals inbox."""

from __future__ import annotations

import pytest
from django.utils import timezone

from executions import services
from governance.models import Notification, NotificationPreference
from tests.factories import ScriptedLLM, make_agent, tool_reply

pytestmark = pytest.mark.django_db

QUESTION = {"interaction_type": "clarification_request", "message": "Which invoice, March or April?"}


def test_preferences_page_saves_ticked_and_unticked_boxes(client, owner):
    client.force_login(owner)
    page = client.get("/settings/notifications")
    assert page.status_code == 200
    assert b'name="every_end"' in page.content and b'name="slack"' in page.content

    response = client.post("/settings/notifications", {"email": "on", "question": "on", "every_end": "on"})
    assert response.status_code == 302
    stored = NotificationPreference.objects.get(user=owner)
    assert (stored.in_app, stored.email, stored.slack) == (False, True, False)
    assert (stored.question, stored.every_end, stored.failed) == (True, True, False)


def test_preferences_page_needs_a_sign_in(client):
    response = client.get("/settings/notifications")
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_a_resolved_notification_shows_who_decided_and_leaves_the_bell(client, owner, workspace):
    from tenancy.time_zones import person_time_zone_set

    workspace.time_zone = "Asia/Tokyo"
    workspace.save(update_fields=["time_zone"])
    person_time_zone_set(user=owner, time_zone="America/New_York")  # times are the reader's, not the workspace's
    Notification.objects.create(workspace=workspace, user=owner, kind="approval_requested", title="Approval needed: x",
                                url="/approvals/1/", resolved_at=timezone.now(), resolution="Approved by editor, Mar 3")
    Notification.objects.create(workspace=workspace, user=owner, kind="run_ended", title="Run 9 failed",
                                url="/runs/9/")
    client.force_login(owner)

    panel = client.get("/notifications/panel").content.decode()
    assert "Run 9 failed" in panel and "Approval needed: x" not in panel
    assert 'title="America/New_York"' in panel and "Asia/Tokyo" not in panel

    page = client.get("/notifications/").content.decode()
    assert "Approved by editor, Mar 3" in page
    assert client.get("/nav/counts").json()["notifications"] == 1


def test_the_inbox_lists_questions_for_the_person_asked(client, owner, workspace, editor):
    agent = make_agent(workspace=workspace, owner=owner, tools=["ask_user"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="pay the invoice"))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([tool_reply("ask_user", QUESTION, "q1")]))

    client.force_login(owner)
    page = client.get("/approvals/").content.decode()
    assert "Questions for you" in page
    assert "Which invoice, March or April?" in page
    assert f"/runs/{execution.pk}/#question-q1" in page

    client.force_login(editor)
    assert "Which invoice" not in client.get("/approvals/").content.decode()

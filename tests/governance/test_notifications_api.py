"""The notifications API: a person's own notifications and preferences, strict input,
and another person's notification is a 404."""

from __future__ import annotations

import pytest
from django.utils import timezone

from governance.models import Notification, NotificationPreference

pytestmark = pytest.mark.django_db


def _note(user, workspace, *, title="Approval needed", read=False, resolved=False):
    return Notification.objects.create(
        workspace=workspace, user=user, kind="approval_requested", title=title, url="/approvals/x/",
        read_at=timezone.now() if read else None, resolved_at=timezone.now() if resolved else None,
        resolution="Approved by someone" if resolved else "",
    )


def test_list_has_the_documented_shape(owner, workspace, api_client_for):
    note = _note(owner, workspace)
    response = api_client_for(owner).get("/api/v1/notifications/")
    assert response.status_code == 200
    [item] = response.json()["results"]
    assert {"id", "kind", "title", "url", "read", "resolved", "created_at"} <= set(item)
    assert item["id"] == note.pk and item["read"] is False and item["resolved"] is False
    assert item["url"] == "/approvals/x/"


def test_unread_leaves_out_read_and_resolved(owner, workspace, api_client_for):
    fresh = _note(owner, workspace, title="fresh")
    _note(owner, workspace, title="read", read=True)
    _note(owner, workspace, title="decided", resolved=True)
    client = api_client_for(owner)
    assert [item["id"] for item in client.get("/api/v1/notifications/?unread=true").json()["results"]] == [fresh.pk]
    assert len(client.get("/api/v1/notifications/").json()["results"]) == 3


@pytest.mark.parametrize("value", ["maybe", "yes please", "2", "tru"])
def test_unread_that_is_not_a_boolean_is_a_400_naming_it(owner, api_client_for, value):
    response = api_client_for(owner).get("/api/v1/notifications/", {"unread": value})
    assert response.status_code == 400
    assert "unread" in response.json()["error"]["details"]


def test_list_holds_only_the_callers_notifications(owner, outsider, workspace, other_workspace, api_client_for):
    _note(outsider, other_workspace)
    assert api_client_for(owner).get("/api/v1/notifications/").json()["results"] == []


def test_mark_one_read(owner, workspace, api_client_for):
    note = _note(owner, workspace)
    response = api_client_for(owner).post(f"/api/v1/notifications/{note.pk}/read")
    assert response.status_code == 200
    assert response.json()["read"] is True
    note.refresh_from_db()
    assert note.read_at is not None


def test_outsider_gets_404_for_another_persons_notification(owner, outsider, workspace, api_client_for):
    note = _note(owner, workspace)
    response = api_client_for(outsider).post(f"/api/v1/notifications/{note.pk}/read")
    assert response.status_code == 404
    note.refresh_from_db()
    assert note.read_at is None


@pytest.mark.parametrize("bad_id", ["abc", "٣", "0", "99999999999999999999999", "-1"])
def test_an_id_that_is_not_one_is_a_404_and_marks_nothing(owner, workspace, api_client_for, bad_id):
    note = _note(owner, workspace)
    assert api_client_for(owner).post(f"/api/v1/notifications/{bad_id}/read").status_code == 404
    note.refresh_from_db()
    assert note.read_at is None


def test_read_all_marks_only_the_callers(owner, outsider, workspace, other_workspace, api_client_for):
    _note(owner, workspace)
    _note(owner, workspace)
    theirs = _note(outsider, other_workspace)
    response = api_client_for(owner).post("/api/v1/notifications/read-all")
    assert response.status_code == 200
    assert response.json() == {"marked": 2}
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_anonymous_callers_are_refused(api_client_for):
    assert api_client_for(None).get("/api/v1/notifications/").status_code in (401, 403)
    assert api_client_for(None).get("/api/v1/notifications/preferences").status_code in (401, 403)


def test_preferences_default_then_patch_is_partial_and_per_user(owner, editor, api_client_for):
    client = api_client_for(owner)
    assert client.get("/api/v1/notifications/preferences").json() == {
        "channels": {"in_app": True, "email": False, "slack": False},
        "events": {"approval_pause": True, "question": True, "failed": True, "not_answered": True,
                   "every_end": False},
    }
    response = client.patch("/api/v1/notifications/preferences",
                            {"channels": {"email": True}, "events": {"every_end": True}}, format="json")
    assert response.status_code == 200
    assert response.json()["channels"] == {"in_app": True, "email": True, "slack": False}
    assert response.json()["events"]["every_end"] is True
    stored = NotificationPreference.objects.get(user=owner)
    assert stored.email and stored.every_end and stored.in_app
    assert not NotificationPreference.objects.filter(user=editor).exists()
    assert api_client_for(editor).get("/api/v1/notifications/preferences").json()["channels"]["email"] is False


@pytest.mark.parametrize(("body", "field"), [
    ({"channels": {"email": "yes"}}, "channels"),
    ({"channels": {"email": 1}}, "channels"),
    ({"channels": {"email": None}}, "channels"),
    ({"channels": {"pager": True}}, "channels"),
    ({"events": {"every_end": "true"}}, "events"),
    ({"events": {"on_sunday": True}}, "events"),
    ({"events": ["every_end"]}, "events"),
    ({"channels": "all"}, "channels"),
    ({"colour": "blue"}, "colour"),
    ({"user": 2}, "user"),
])
def test_bad_preferences_are_a_400_naming_the_field_and_change_nothing(owner, api_client_for, body, field):
    response = api_client_for(owner).patch("/api/v1/notifications/preferences", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not NotificationPreference.objects.filter(user=owner).exists()


@pytest.mark.parametrize("body", [[], "text", 5])
def test_a_body_that_is_not_an_object_is_a_400(owner, api_client_for, body):
    response = api_client_for(owner).patch("/api/v1/notifications/preferences", body, format="json")
    assert response.status_code == 400
    assert not NotificationPreference.objects.filter(user=owner).exists()

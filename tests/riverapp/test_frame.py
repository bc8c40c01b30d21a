"""The frame every page shares: live counts, the bell's panel, marking read and the
workspace switch."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from governance.approvals import may_resolve
from governance.models import ApprovalRequest, Notification
from tenancy.models import Membership, Workspace
from tenancy.permissions import Role

pytestmark = pytest.mark.django_db


def _notify(user, workspace, title="Approval needed", read=False):
    return Notification.objects.create(user=user, workspace=workspace, kind="approval_requested", title=title,
                                       url="/approvals/", read_at=timezone.now() if read else None)


def _pending(workspace, roles=("admin",)):
    return ApprovalRequest.objects.create(workspace=workspace, execution_id=1, tool_name="write_back",
                                          approver_roles=list(roles),
                                          expires_at=timezone.now() + timezone.timedelta(hours=1))


@pytest.fixture
def second_workspace(org, owner):
    ws = Workspace.objects.create(organization=org, name="Finance", slug="finance")
    Membership.objects.create(workspace=ws, user=owner, role=Role.ADMIN)
    return ws


def test_counts_are_the_users_own_in_the_current_workspace(client, owner, workspace, outsider, other_workspace):
    _notify(owner, workspace)
    _notify(owner, workspace, read=True)
    _notify(outsider, other_workspace)
    _pending(workspace)
    _pending(workspace)
    _pending(other_workspace)
    client.force_login(owner)
    response = client.get("/nav/counts")
    assert response.status_code == 200
    assert response.json() == {"approvals": 2, "notifications": 1}
    assert response["Cache-Control"] == "no-store"


def test_counts_need_a_signed_in_user(client):
    assert client.get("/nav/counts").status_code == 302


def test_bell_panel_lists_only_my_unread_notifications(client, owner, workspace, outsider, other_workspace):
    _notify(owner, workspace, title="Mine, unread")
    _notify(owner, workspace, title="Mine, read", read=True)
    _notify(outsider, other_workspace, title="Someone else's")
    client.force_login(owner)
    html = client.get("/notifications/panel").content.decode()
    assert "Mine, unread" in html
    assert "Mine, read" not in html and "Someone else" not in html
    assert 'name="csrfmiddlewaretoken"' in html


def test_mark_read_from_the_panel_answers_with_the_panel_and_a_counts_trigger(client, owner, workspace):
    first = _notify(owner, workspace, title="First")
    _notify(owner, workspace, title="Second")
    client.force_login(owner)
    response = client.post("/notifications/read", {"id": first.pk}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert response["HX-Trigger"] == "river:counts-changed"
    html = response.content.decode()
    assert "Second" in html and "First" not in html
    first.refresh_from_db()
    assert first.read_at is not None


def test_mark_all_read_from_the_page_redirects_back(client, owner, workspace):
    _notify(owner, workspace)
    _notify(owner, workspace)
    client.force_login(owner)
    response = client.post("/notifications/read", {"next": "/notifications/?show=unread"})
    assert response.status_code == 302 and response["Location"] == "/notifications/?show=unread"
    assert not Notification.objects.filter(user=owner, read_at__isnull=True).exists()


def test_another_users_notification_is_not_marked(client, owner, outsider, other_workspace):
    theirs = _notify(outsider, other_workspace)
    client.force_login(owner)
    client.post("/notifications/read", {"id": theirs.pk})
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_mark_read_refuses_a_bad_id_and_get(client, owner):
    client.force_login(owner)
    assert client.post("/notifications/read", {"id": "1 OR 1=1"}).status_code == 400
    assert client.get("/notifications/read").status_code == 405


def test_mark_read_needs_csrf(owner, workspace):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(owner)
    _notify(owner, workspace)
    assert strict.post("/notifications/read").status_code == 403
    assert Notification.objects.filter(read_at__isnull=True).count() == 1


def test_mark_read_refuses_an_open_redirect(client, owner):
    client.force_login(owner)
    response = client.post("/notifications/read", {"next": "https://evil.example/"})
    assert response["Location"] == "/notifications/"


def test_notifications_page_filters_unread_and_paginates(client, owner, workspace):
    for n in range(30):
        _notify(owner, workspace, title=f"Note {n}", read=n % 2 == 0)
    client.force_login(owner)
    unread = client.get("/notifications/?show=unread")
    assert unread.status_code == 200
    assert unread.context["page"].paginator.count == 15
    everything = client.get("/notifications/")
    assert everything.context["page"].paginator.count == 30
    assert "show=unread&amp;page=2" not in everything.content.decode()
    second = client.get("/notifications/?page=2")
    assert len(second.context["page"].object_list) == 5


def test_switching_workspace_changes_what_pages_show(client, owner, workspace, second_workspace):
    _pending(second_workspace)
    client.force_login(owner)
    client.post("/workspace/", {"workspace": workspace.pk})
    assert client.get("/nav/counts").json()["approvals"] == 0
    assert client.get("/").context["workspace"] == workspace
    response = client.post("/workspace/", {"workspace": second_workspace.pk, "next": "/runs/12345/?status=failed"})
    # The same section, without the previous workspace's run or filter.
    assert response.status_code == 302 and response["Location"] == "/runs/"
    assert client.get("/nav/counts").json()["approvals"] == 1
    page = client.get("/")
    assert page.context["workspace"] == second_workspace
    assert "Now showing Finance" in page.content.decode()


def test_switching_to_someone_elses_workspace_is_a_404(client, owner, other_workspace):
    client.force_login(owner)
    assert client.post("/workspace/", {"workspace": other_workspace.pk}).status_code == 404
    assert client.post("/workspace/", {"workspace": "nope"}).status_code == 404
    assert client.post("/workspace/", {"workspace": 999999}).status_code == 404


def test_switching_refuses_an_open_redirect(client, owner, workspace, second_workspace):
    client.force_login(owner)
    for target in ("https://evil.example/runs/", "//evil.example/", "/\\evil.example"):
        response = client.post("/workspace/", {"workspace": second_workspace.pk, "next": target})
        assert response["Location"] == "/", target


def test_the_frame_names_the_socket_of_the_current_workspace(client, owner, workspace, second_workspace):
    client.force_login(owner)
    client.post("/workspace/", {"workspace": second_workspace.pk})
    html = client.get("/notifications/").content.decode()
    assert f'data-frame-socket="/ws/frame/?workspace={second_workspace.pk}"' in html
    assert 'aria-controls="ws-menu"' in html and 'aria-controls="bell-panel"' in html
    assert 'id="live-status"' in html


def _badge(page: str) -> str:
    """The Approvals badge of the main navigation: its number, or "" when it is hidden."""
    match = re.search(r'<span class="count" data-live-count="approvals"( hidden)?><span data-live-value>(\d+)</span>',
                      page)
    assert match, "no Approvals badge in the page"
    return "" if match.group(1) else match.group(2)


def test_the_approvals_badge_counts_only_requests_the_user_may_decide(client, owner, editor, org_admin, workspace):
    """A workspace admin holds approval:resolve, but a request for editors is not theirs to
    decide: no badge, nothing on the overview, and the inbox agrees (it is someone else's)."""
    for_editors = _pending(workspace, roles=("editor",))
    client.force_login(owner)
    assert client.get("/nav/counts").json()["approvals"] == 0
    assert _badge(client.get("/").content.decode()) == ""
    assert not may_resolve(user=owner, approval=for_editors)
    inbox = client.get("/approvals/").content.decode()
    assert f"/approvals/{for_editors.pk}/" not in inbox

    client.force_login(editor)
    assert client.get("/nav/counts").json()["approvals"] == 1
    assert _badge(client.get("/").content.decode()) == "1"

    # An organization admin may decide any request, except one for a run they started
    # (the workspace does not allow self-approval).
    mine = _pending(workspace, roles=("editor",))
    mine.run_started_by = org_admin
    mine.save(update_fields=["run_started_by"])
    client.force_login(org_admin)
    assert client.get("/nav/counts").json()["approvals"] == 1
    assert _badge(client.get("/").content.decode()) == "1"

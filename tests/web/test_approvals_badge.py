"""The frame's Approvals badge counts only the pending requests the person may decide:
for every user it equals the number of requests ``may_resolve`` (the rule every
decision goes through) allows, so an admin never sees a count for a request whose
approver roles leave them out or whose run they requested."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from governance.approvals import approvals_pending_count, may_resolve
from governance.models import ApprovalRequest

pytestmark = pytest.mark.django_db


def _pending(workspace, roles, started_by=None):
    return ApprovalRequest.objects.create(workspace=workspace, execution_id=1, tool_name="write_back",
                                          approver_roles=list(roles), run_started_by=started_by,
                                          expires_at=timezone.now() + timedelta(hours=1))


def _badge(user) -> int:
    client = Client()
    client.force_login(user)
    return client.get("/nav/counts").json()["approvals"]


def test_an_admin_left_out_by_the_approver_roles_sees_no_badge(owner, workspace):
    _pending(workspace, ["editor"])
    assert _badge(owner) == 0
    page = Client()
    page.force_login(owner)
    assert 'data-live-count="approvals" hidden' in page.get("/agents/").content.decode()


def test_an_admin_never_counts_a_request_of_their_own_run(owner, workspace):
    _pending(workspace, ["admin"], started_by=owner)
    assert _badge(owner) == 0
    workspace.allow_self_approval = True
    workspace.save(update_fields=["allow_self_approval"])
    assert _badge(owner) == 1


def test_the_badge_is_what_may_resolve_allows_for_everyone(owner, editor, member, org_admin, workspace):
    requests = [_pending(workspace, ["admin"]), _pending(workspace, ["editor"]),
                _pending(workspace, ["admin", "editor"], started_by=editor),
                _pending(workspace, ["admin"], started_by=owner), _pending(workspace, [])]
    for user in (owner, editor, member, org_admin):
        decidable = sum(may_resolve(user=user, approval=a) for a in requests)
        assert approvals_pending_count(user=user, workspace=workspace) == decidable, user
    assert [approvals_pending_count(user=u, workspace=workspace) for u in (owner, editor, member, org_admin)] == [
        2, 1, 0, 5]  # an organization admin decides every request, whatever its roles

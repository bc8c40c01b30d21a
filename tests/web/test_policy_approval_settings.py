"""A policy's approval settings on its page (issue 29): how many people must approve the
calls it pauses and whether approval needs an effect preview. Saved through the API's
services, with the API's messages at the field; members without the right 403,
other workspaces 404; hostile values refused with nothing written."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from governance.models import AuditLogEntry, Policy
from governance.services import policy_create

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form(**overrides) -> dict:
    data = {
        "name": "Deletes need two",
        "description": "",
        "expression": "args.operation == 'delete'",
        "policy_type": "",
        "enforcement": "require_approval",
        "enabled": "on",
        "required_approvals": "2",
        "require_preview": "on",
    }
    data.update(overrides)
    return data


@pytest.fixture
def policy(owner, workspace):
    return policy_create(
        actor=owner,
        scope="workspace",
        workspace_id=workspace.pk,
        name="Night writes",
        conditions={"expression": "time.hour >= 22"},
        enforcement="require_approval",
    )


def test_create_with_a_quorum_and_a_required_preview(owner, workspace):
    response = _client(owner).post("/policies/new/", _form())
    assert response.status_code == 302
    created = Policy.objects.get(name="Deletes need two")
    assert created.required_approvals == 2 and created.require_preview is True
    listing = _client(owner).get("/policies/").content.decode()
    assert "2 approvers" in listing and "preview required" in listing


def test_the_form_shows_the_stored_settings(owner, policy):
    Policy.objects.filter(pk=policy.pk).update(required_approvals=3, require_preview=True)
    page = _client(owner).get(f"/policies/{policy.pk}/").content.decode()
    assert 'name="required_approvals" value="3"' in page
    assert re.search(r'<input type="checkbox" name="require_preview"[^>]* checked', page)


def test_edit_changes_them_and_the_change_is_audited(owner, policy):
    response = _client(owner).post(
        f"/policies/{policy.pk}/", _form(name="Night writes", required_approvals="3", require_preview="")
    )
    assert response.status_code == 302
    policy.refresh_from_db()
    assert policy.required_approvals == 3 and policy.require_preview is False
    entry = AuditLogEntry.objects.get(event_type="policy_updated", policy_id=policy.pk)
    assert entry.details["changes"]["required_approvals"] == {"from": 1, "to": 3}


def test_more_than_one_approver_without_require_approval_is_refused_at_the_field(owner, api_client_for, workspace):
    response = _client(owner).post("/policies/new/", _form(enforcement="block"))
    assert response.status_code == 400
    body = response.content.decode()
    api = api_client_for(owner).post(
        "/api/v1/policies/",
        {
            "name": "x",
            "scope": "workspace",
            "workspace_id": workspace.pk,
            "enforcement": "block",
            "conditions": {"expression": "args.operation == 'delete'"},
            "required_approvals": 2,
        },
        format="json",
    )
    assert api.status_code == 400
    message = api.json()["error"]["details"]["required_approvals"][0]
    assert 'id="id_required_approvals_error"' in body and message in body
    assert not Policy.objects.exists()


@pytest.mark.parametrize("value", ["0", "11", "-1", "2.5", "two", "2\x00", "<b>2</b>", "9" * 5000])
def test_hostile_approver_counts_are_refused_at_the_field(owner, policy, value):
    response = _client(owner).post(f"/policies/{policy.pk}/", _form(name="Night writes", required_approvals=value))
    assert response.status_code == 400
    assert 'id="id_required_approvals_error"' in response.content.decode()
    policy.refresh_from_db()
    assert policy.required_approvals == 1 and policy.name == "Night writes" and policy.require_preview is False
    assert not AuditLogEntry.objects.filter(event_type="policy_updated", policy_id=policy.pk).exists()


def test_a_member_without_the_right_gets_403_and_nothing_changes(member, editor, policy):
    for user in (member, editor):
        assert _client(user).post(f"/policies/{policy.pk}/", _form(name="Night writes")).status_code == 403
        assert _client(user).post("/policies/new/", _form()).status_code == 403
    policy.refresh_from_db()
    assert policy.required_approvals == 1 and not Policy.objects.filter(name="Deletes need two").exists()


def test_an_outsider_gets_404_and_nothing_changes(outsider, policy):
    assert _client(outsider).post(f"/policies/{policy.pk}/", _form(name="Night writes")).status_code == 404
    policy.refresh_from_db()
    assert policy.required_approvals == 1 and policy.require_preview is False

"""The API keys page: trigger API keys and personal access tokens listed (never their
secret or digest), created through the API's services with the secret shown once,
revoked after a confirm step by whoever the API lets revoke them, refused by the REST
API once revoked; outsiders 404, hostile input refused at its field."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from governance.models import AuditLogEntry
from tenancy.models import AccessToken
from tenancy.services import token_issue
from tests.factories import make_agent
from triggers.apikeys import api_key_issue
from triggers.models import ApiKey
from triggers.services import trigger_create

pytestmark = pytest.mark.django_db

SECRET = re.compile(r"(rtk|rvr)_[0-9a-f]+_[A-Za-z0-9_\-]+")


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _secret_on(response) -> str:
    return re.search(r'<code id="issued-secret">([^<]+)</code>', response.content.decode()).group(1)


@pytest.fixture
def disabled_api_trigger(owner, workspace):
    """An API trigger that is off: a live key gets 409 from it, a dead one 401, and no run starts."""
    agent = make_agent(workspace=workspace, owner=owner, name="Triage")
    return trigger_create(actor=owner, workspace=workspace, agent=agent, name="Orders", trigger_type="api",
                          enabled=False)


def _invoke(trigger, key: str) -> int:
    return APIClient().post(f"/api/v1/triggers/{trigger.pk}/invoke", {}, format="json",
                            HTTP_X_API_KEY=key).status_code


def test_the_list_shows_prefix_owner_scope_but_never_a_secret(owner, member, workspace, org, org_admin):
    issued = api_key_issue(created_by=owner, workspace=workspace, name="CRM relay", rate_limit_per_minute=30)
    org_key = api_key_issue(created_by=org_admin, organization=org, name="Org-wide")
    for user in (owner, member):
        body = _client(user).get("/settings/api-keys").content.decode()
        assert "CRM relay" in body and f"rtk_{issued.key.prefix}" in body and ">owner<" in body
        assert issued.plaintext not in body and issued.key.digest not in body
        assert not SECRET.search(body)
        assert "Org-wide" not in body  # an organization's key is its admins' business
    assert "Org-wide" in _client(org_admin).get("/settings/api-keys").content.decode()
    assert org_key.key.workspace_id is None


def test_an_org_admin_sees_and_revokes_the_organizations_keys(org, org_admin, workspace):
    org_key = api_key_issue(created_by=org_admin, organization=org, name="Org-wide")
    client = _client(org_admin)
    body = client.get("/settings/api-keys").content.decode()
    assert "Org-wide" in body and "Every workspace of Acme" in body
    assert f"/settings/api-keys/{org_key.key.pk}/revoke" in body
    assert client.post(f"/settings/api-keys/{org_key.key.pk}/revoke").status_code == 302
    org_key.key.refresh_from_db()
    assert org_key.key.revoked_at is not None


def test_creating_a_key_shows_it_once_and_it_works(owner, workspace, disabled_api_trigger):
    client = _client(owner)
    response = client.post("/settings/api-keys/new", {"key-name": "Billing relay", "key-scope": "workspace",
                                                      "key-rate_limit_per_minute": "12"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]
    plaintext = _secret_on(response)
    key = ApiKey.objects.get(name="Billing relay")
    assert (key.workspace_id, key.created_by_id, key.rate_limit_per_minute) == (workspace.pk, owner.pk, 12)
    assert plaintext.startswith(f"rtk_{key.prefix}_")
    assert _invoke(disabled_api_trigger, plaintext) == 409  # authenticated; the trigger is off
    assert plaintext not in client.get("/settings/api-keys").content.decode()


def test_a_revoked_key_is_refused_by_the_api(owner, workspace, disabled_api_trigger):
    issued = api_key_issue(created_by=owner, workspace=workspace, name="CRM")
    client = _client(owner)
    confirm = client.get(f"/settings/api-keys/{issued.key.pk}/revoke")
    assert confirm.status_code == 200 and "Revoke the API key CRM?" in confirm.content.decode()
    issued.key.refresh_from_db()
    assert issued.key.revoked_at is None  # asking is not doing
    assert client.post(f"/settings/api-keys/{issued.key.pk}/revoke").status_code == 302
    assert _invoke(disabled_api_trigger, issued.plaintext) == 401
    assert "Revoked" in client.get("/settings/api-keys").content.decode()


def test_creating_and_revoking_a_token(owner):
    client = _client(owner)
    response = client.post("/settings/tokens/new", {"token-name": "Reporting script", "token-expires_at": ""})
    assert response.status_code == 200
    plaintext = _secret_on(response)
    token = AccessToken.objects.get(name="Reporting script")
    assert token.user == owner and plaintext.startswith(f"rvr_{token.prefix}_")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert api.get("/api/v1/workspaces/").status_code == 200
    assert client.post(f"/settings/tokens/{token.pk}/revoke").status_code == 302
    assert api.get("/api/v1/workspaces/").status_code == 401
    assert plaintext not in client.get("/settings/api-keys").content.decode()


def test_an_analyst_may_not_issue_or_revoke_a_workspace_key(member, owner, workspace):
    issued = api_key_issue(created_by=owner, workspace=workspace, name="CRM")
    client = _client(member)
    body = client.get("/settings/api-keys").content.decode()
    assert "Create the API key" not in body and f"/settings/api-keys/{issued.key.pk}/revoke" not in body
    assert client.post("/settings/api-keys/new", {"key-name": "Mine", "key-scope": "workspace"}).status_code == 403
    assert client.get(f"/settings/api-keys/{issued.key.pk}/revoke").status_code == 403
    assert client.post(f"/settings/api-keys/{issued.key.pk}/revoke").status_code == 403
    issued.key.refresh_from_db()
    assert issued.key.revoked_at is None and not ApiKey.objects.filter(name="Mine").exists()


def test_a_workspace_admin_may_not_issue_an_organizations_key(owner):
    response = _client(owner).post("/settings/api-keys/new", {"key-name": "Everything", "key-scope": "organization"})
    assert response.status_code == 400
    assert 'id="id_key-scope_error"' in response.content.decode()
    assert not ApiKey.objects.exists()


def test_outsider_gets_404_and_sees_nothing(outsider, owner, workspace):
    issued = api_key_issue(created_by=owner, workspace=workspace, name="CRM")
    token = token_issue(user=owner, name="Owner's script")
    client = _client(outsider)
    body = client.get("/settings/api-keys").content.decode()
    assert "CRM" not in body and "Owner&#x27;s script" not in body and "Owner's script" not in body
    for path in (f"/settings/api-keys/{issued.key.pk}/revoke", f"/settings/tokens/{token.token.pk}/revoke"):
        assert client.get(path).status_code == 404
        assert client.post(path).status_code == 404
    issued.key.refresh_from_db()
    token.token.refresh_from_db()
    assert issued.key.revoked_at is None and token.token.revoked_at is None


def test_a_colleague_cannot_revoke_my_token(owner, member):
    token = token_issue(user=member, name="Mine")
    assert _client(owner).post(f"/settings/tokens/{token.token.pk}/revoke").status_code == 404
    token.token.refresh_from_db()
    assert token.token.revoked_at is None


@pytest.mark.parametrize("bad", ["x", "99999999999999999999999", "-1", "1e3"])
def test_a_malformed_id_is_404(owner, bad):
    assert _client(owner).get(f"/settings/api-keys/{bad}/revoke").status_code == 404
    assert _client(owner).get(f"/settings/tokens/{bad}/revoke").status_code == 404


@pytest.mark.parametrize(("data", "field"), [
    ({"key-name": "", "key-scope": "workspace"}, "key-name"),
    ({"key-name": "   ", "key-scope": "workspace"}, "key-name"),
    ({"key-name": "n" * 101, "key-scope": "workspace"}, "key-name"),
    ({"key-name": "ok", "key-scope": "galaxy"}, "key-scope"),
    ({"key-name": "ok", "key-scope": "workspace", "key-rate_limit_per_minute": "0"}, "key-rate_limit_per_minute"),
    ({"key-name": "ok", "key-scope": "workspace", "key-rate_limit_per_minute": "1000001"},
     "key-rate_limit_per_minute"),
    ({"key-name": "ok", "key-scope": "workspace", "key-rate_limit_per_minute": "ten"}, "key-rate_limit_per_minute"),
    ({"key-name": "a\x00b", "key-scope": "workspace"}, "key-name"),
])
def test_a_bad_key_field_is_refused_at_the_field(owner, data, field):
    response = _client(owner).post("/settings/api-keys/new", data)
    assert response.status_code == 400
    assert f'id="id_{field}_error"' in response.content.decode()
    assert not ApiKey.objects.exists()


@pytest.mark.parametrize(("data", "field"), [
    ({"token-name": ""}, "token-name"),
    ({"token-name": "n" * 101}, "token-name"),
    ({"token-name": "ok", "token-expires_at": "2001-01-01"}, "token-expires_at"),
    ({"token-name": "ok", "token-expires_at": "tomorrow"}, "token-expires_at"),
])
def test_a_bad_token_field_is_refused_at_the_field(owner, data, field):
    response = _client(owner).post("/settings/tokens/new", data)
    assert response.status_code == 400
    assert f'id="id_{field}_error"' in response.content.decode()
    assert not AccessToken.objects.exists()


def test_hostile_names_are_escaped(owner):
    client = _client(owner)
    client.post("/settings/api-keys/new", {"key-name": "<img src=x onerror=alert(1)>", "key-scope": "workspace"})
    body = client.get("/settings/api-keys").content.decode()
    assert "<img src=x" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body


def test_without_csrf_nothing_is_issued_or_revoked(owner, workspace):
    issued = api_key_issue(created_by=owner, workspace=workspace, name="CRM")
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post("/settings/api-keys/new", {"key-name": "X", "key-scope": "workspace"}).status_code == 403
    assert client.post(f"/settings/api-keys/{issued.key.pk}/revoke").status_code == 403
    issued.key.refresh_from_db()
    assert issued.key.revoked_at is None and ApiKey.objects.count() == 1


def test_the_page_audits_what_the_api_audits(owner, workspace, api_client_for):
    """Neither ``/api/v1/api-keys/`` nor ``/api/v1/tokens/`` writes an audit entry when a
    secret is issued or revoked; the page calls the same services and writes none either."""
    client = _client(owner)
    client.post("/settings/api-keys/new", {"key-name": "Page key", "key-scope": "workspace"})
    client.post("/settings/tokens/new", {"token-name": "Page token"})
    api = api_client_for(owner)
    assert api.post("/api/v1/api-keys/", {"name": "API key", "workspace": workspace.pk},
                    format="json").status_code == 201
    assert AuditLogEntry.objects.count() == 0


def test_the_frame_links_to_the_page(owner):
    assert 'href="/settings/api-keys"' in _client(owner).get("/runs/").content.decode()

"""Workspaces and personal access tokens over REST."""

from datetime import timedelta

from django.utils import timezone
from rest_framework.test import APIClient

from tenancy.models import AccessToken
from tenancy.services import token_authenticate, token_issue


def test_workspace_list_shows_only_the_callers_workspaces(api_client_for, owner, workspace, other_workspace):
    response = api_client_for(owner).get("/api/v1/workspaces/")
    assert response.status_code == 200
    assert [row["id"] for row in response.json()["results"]] == [workspace.pk]


def test_workspace_detail_carries_roles_and_permissions(api_client_for, member, workspace):
    response = api_client_for(member).get(f"/api/v1/workspaces/{workspace.pk}/")
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "Support"
    assert body["roles"] == ["analyst"]
    assert "data_source:query" in body["permissions"]
    assert "agent:create" not in body["permissions"]


def test_org_admin_sees_every_workspace_of_the_org(api_client_for, org_admin, workspace):
    body = api_client_for(org_admin).get(f"/api/v1/workspaces/{workspace.pk}/").json()
    assert body["roles"] == ["org_admin"]
    assert "policy:create" in body["permissions"]


def test_outsider_gets_404_on_workspace_detail(api_client_for, outsider, workspace):
    response = api_client_for(outsider).get(f"/api/v1/workspaces/{workspace.pk}/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_missing_workspace_looks_like_a_foreign_one(api_client_for, outsider, workspace):
    missing = api_client_for(outsider).get(f"/api/v1/workspaces/{workspace.pk + 999}/")
    foreign = api_client_for(outsider).get(f"/api/v1/workspaces/{workspace.pk}/")
    assert missing.status_code == foreign.status_code == 404
    assert missing.json() == foreign.json()


def test_token_created_over_the_api_is_shown_once_and_works(api_client_for, owner):
    client = api_client_for(owner)
    response = client.post("/api/v1/tokens/", {"name": "ci"}, format="json")
    assert response.status_code == 201
    plaintext = response.json()["token"]
    assert token_authenticate(plaintext=plaintext).user == owner

    listed = client.get("/api/v1/tokens/")
    assert listed.status_code == 200
    assert plaintext not in listed.content.decode()
    assert "digest" not in listed.content.decode()
    names = [row["name"] for row in listed.json()["results"]]
    assert "ci" in names

    fetched_again = _client_with(plaintext).get("/api/v1/workspaces/")
    assert fetched_again.status_code == 200


def _client_with(plaintext):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def test_token_with_expiry(api_client_for, owner):
    expires = timezone.now() + timedelta(days=7)
    response = api_client_for(owner).post(
        "/api/v1/tokens/", {"name": "week", "expires_at": expires.isoformat()}, format="json"
    )
    assert response.status_code == 201
    assert AccessToken.objects.get(pk=response.json()["id"]).expires_at == expires


def test_token_expiring_in_the_past_is_refused(api_client_for, owner):
    response = api_client_for(owner).post(
        "/api/v1/tokens/", {"expires_at": (timezone.now() - timedelta(minutes=1)).isoformat()}, format="json"
    )
    assert response.status_code == 400
    assert "expires_at" in response.json()["error"]["details"]


def test_tokens_list_is_only_the_callers(api_client_for, owner, outsider):
    token_issue(user=outsider, name="outsiders-token")
    body = api_client_for(owner).get("/api/v1/tokens/").json()
    assert "outsiders-token" not in [row["name"] for row in body["results"]]


def test_revoked_token_stops_working(api_client_for, owner):
    issued = token_issue(user=owner, name="to-revoke")
    response = api_client_for(owner).post(f"/api/v1/tokens/{issued.token.pk}/revoke")
    assert response.status_code == 200
    assert response.json()["revoked_at"] is not None
    assert _client_with(issued.plaintext).get("/api/v1/workspaces/").status_code == 401


def test_cannot_revoke_someone_elses_token(api_client_for, owner, outsider):
    theirs = token_issue(user=outsider)
    response = api_client_for(owner).post(f"/api/v1/tokens/{theirs.token.pk}/revoke")
    assert response.status_code == 404
    assert token_authenticate(plaintext=theirs.plaintext) is not None


def test_openapi_schema_is_served(api_client_for, owner):
    response = api_client_for(owner).get("/api/schema/")
    assert response.status_code == 200
    text = response.content.decode()
    assert "/api/v1/agents/{agent_id}/activate" in text
    assert "/api/v1/llm-providers/" in text

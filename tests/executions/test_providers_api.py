"""LLM providers over REST and in the admin: org admins only, API key write-only."""

import pytest
from django.contrib.auth import get_user_model

from common.crypto import decrypt_text
from executions.models import LLMProvider
from executions.providers import llm_provider_create
from tenancy.models import OrganizationMember

SECRET = "sk-test-do-not-leak-0123456789"


@pytest.fixture
def provider(org):
    return llm_provider_create(
        organization=org, provider_name="openai", api_key=SECRET, models={"fast": "openai/gpt-4o-mini"}
    )


@pytest.fixture
def other_org_admin(other_org):
    user = get_user_model().objects.create_user(username="globex-admin", password="x")
    OrganizationMember.objects.create(organization=other_org, user=user, role=OrganizationMember.OrgRole.ADMIN)
    return user


def test_org_admin_creates_a_provider_and_the_key_is_encrypted(api_client_for, org_admin, org):
    response = api_client_for(org_admin).post(
        "/api/v1/llm-providers/",
        {
            "organization": org.pk,
            "provider_name": "gemini",
            "api_key": SECRET,
            "base_url": "https://generativelanguage.googleapis.com/v1beta",
            "models": {"fast": "gemini/gemini-2.0-flash-lite", "balanced": "gemini/gemini-2.0-flash"},
            "priority": 1,
            "rate_limit_rpm": 120,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert SECRET not in response.content.decode()
    body = response.json()
    assert body["has_api_key"] is True
    assert body["models"]["balanced"] == "gemini/gemini-2.0-flash"
    stored = LLMProvider.objects.get(pk=body["id"])
    assert SECRET not in stored.api_key_encrypted
    assert decrypt_text(stored.api_key_encrypted) == SECRET


def test_api_key_never_appears_in_any_response(api_client_for, org_admin, provider):
    client = api_client_for(org_admin)
    responses = [
        client.get("/api/v1/llm-providers/"),
        client.get(f"/api/v1/llm-providers/{provider.pk}/"),
        client.patch(f"/api/v1/llm-providers/{provider.pk}/", {"priority": 3}, format="json"),
        client.patch(f"/api/v1/llm-providers/{provider.pk}/", {"api_key": SECRET + "-new"}, format="json"),
    ]
    for response in responses:
        assert response.status_code == 200
        text = response.content.decode()
        assert SECRET not in text
        assert "api_key_encrypted" not in text
        assert '"api_key"' not in text


def test_patch_without_a_key_keeps_it_and_empty_key_clears_it(api_client_for, org_admin, provider):
    client = api_client_for(org_admin)
    client.patch(f"/api/v1/llm-providers/{provider.pk}/", {"enabled": False}, format="json")
    provider.refresh_from_db()
    assert decrypt_text(provider.api_key_encrypted) == SECRET
    assert provider.enabled is False

    cleared = client.patch(f"/api/v1/llm-providers/{provider.pk}/", {"api_key": ""}, format="json")
    assert cleared.json()["has_api_key"] is False
    provider.refresh_from_db()
    assert provider.api_key_encrypted == ""


def test_models_keys_must_be_tiers(api_client_for, org_admin, org):
    response = api_client_for(org_admin).post(
        "/api/v1/llm-providers/",
        {"organization": org.pk, "provider_name": "openai", "models": {"turbo": "gpt-x"}},
        format="json",
    )
    assert response.status_code == 400
    assert "models" in response.json()["error"]["details"]
    assert not LLMProvider.objects.exists()


def test_bad_numbers_name_the_field(api_client_for, org_admin, provider):
    response = api_client_for(org_admin).patch(
        f"/api/v1/llm-providers/{provider.pk}/", {"timeout_seconds": 0}, format="json"
    )
    assert response.status_code == 400
    assert "timeout_seconds" in response.json()["error"]["details"]


def test_duplicate_provider_name_names_the_field(api_client_for, org_admin, org, provider):
    response = api_client_for(org_admin).post(
        "/api/v1/llm-providers/", {"organization": org.pk, "provider_name": "openai"}, format="json"
    )
    assert response.status_code == 400
    assert "provider_name" in response.json()["error"]["details"]


def test_org_admin_deletes_a_provider(api_client_for, org_admin, provider):
    assert api_client_for(org_admin).delete(f"/api/v1/llm-providers/{provider.pk}/").status_code == 204
    assert not LLMProvider.objects.filter(pk=provider.pk).exists()


def test_workspace_members_who_are_not_org_admins_get_403(api_client_for, owner, member, provider):
    for user in (owner, member):
        client = api_client_for(user)
        assert client.get(f"/api/v1/llm-providers/{provider.pk}/").status_code == 403
        assert client.patch(f"/api/v1/llm-providers/{provider.pk}/", {"priority": 9}, format="json").status_code == 403
        assert client.delete(f"/api/v1/llm-providers/{provider.pk}/").status_code == 403
        assert client.get("/api/v1/llm-providers/").json()["count"] == 0
    provider.refresh_from_db()
    assert provider.priority == 1


@pytest.mark.parametrize("method", ["get", "patch", "delete"])
def test_another_orgs_admin_gets_404(api_client_for, other_org_admin, outsider, provider, method):
    for user in (other_org_admin, outsider):
        response = getattr(api_client_for(user), method)(f"/api/v1/llm-providers/{provider.pk}/")
        assert response.status_code == 404
    assert LLMProvider.objects.filter(pk=provider.pk).exists()


def test_cannot_create_a_provider_in_another_org(api_client_for, other_org_admin, org):
    response = api_client_for(other_org_admin).post(
        "/api/v1/llm-providers/", {"organization": org.pk, "provider_name": "openai"}, format="json"
    )
    assert response.status_code == 400
    assert "organization" in response.json()["error"]["details"]
    assert not LLMProvider.objects.exists()


def test_provider_list_shows_only_administered_orgs(api_client_for, other_org_admin, other_org, provider):
    theirs = llm_provider_create(organization=other_org, provider_name="anthropic")
    body = api_client_for(other_org_admin).get("/api/v1/llm-providers/").json()
    assert [row["id"] for row in body["results"]] == [theirs.pk]


def test_admin_form_never_renders_the_stored_key(client, provider, org):
    superuser = get_user_model().objects.create_superuser(username="root", password="x", email="r@example.com")
    client.force_login(superuser)
    page = client.get(f"/admin/executions/llmprovider/{provider.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert SECRET not in html
    assert provider.api_key_encrypted not in html

    form = {
        "organization": org.pk,
        "provider_name": "openai",
        "api_key": "",
        "base_url": "",
        "tier_models": '{"fast": "openai/gpt-4o-mini"}',
        "priority": 2,
        "max_retries": 2,
        "timeout_seconds": 30,
        "rate_limit_rpm": 60,
        "enabled": "on",
    }
    saved = client.post(f"/admin/executions/llmprovider/{provider.pk}/change/", form)
    assert saved.status_code == 302
    provider.refresh_from_db()
    assert provider.priority == 2
    assert decrypt_text(provider.api_key_encrypted) == SECRET  # blank kept the key

    client.post(f"/admin/executions/llmprovider/{provider.pk}/change/", {**form, "api_key": "sk-rotated"})
    provider.refresh_from_db()
    assert decrypt_text(provider.api_key_encrypted) == "sk-rotated"

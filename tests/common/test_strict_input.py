"""Every API input that refuses unknown keys does it through common.api.StrictInput:
the same 400 naming each unknown key, bounded however many or however long the keys
are, and nothing written."""

import pytest

from tenancy.models import AccessToken
from tests.factories import make_agent
from triggers.models import ApiKey, Trigger, WebhookEndpoint
from triggers.services import trigger_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def active_agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Triage")


def _bodies(workspace, agent):
    return {
        "/api/v1/tokens/": ({"name": "ci"}, AccessToken),
        "/api/v1/api-keys/": ({"workspace": workspace.pk, "name": "CRM"}, ApiKey),
        "/api/v1/webhook-endpoints/": ({"workspace": workspace.pk, "slug": "crm"}, WebhookEndpoint),
        "/api/v1/triggers/": ({"workspace": workspace.pk, "agent": str(agent.pk), "name": "T", "type": "manual"},
                              Trigger),
    }


@pytest.mark.parametrize("url", ["/api/v1/tokens/", "/api/v1/api-keys/", "/api/v1/webhook-endpoints/",
                                 "/api/v1/triggers/"])
def test_an_unknown_key_is_a_400_naming_it_and_writes_nothing(url, api_client_for, owner, workspace, active_agent):
    client = api_client_for(owner)
    body, model = _bodies(workspace, active_agent)[url]
    before = model.objects.count()
    response = client.post(url, {**body, "colour": "red"}, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["error"] == {"code": "validation_error", "message": "The request is invalid.",
                                        "details": {"colour": ["Unknown or read-only field."]}}
    assert model.objects.count() == before


@pytest.mark.parametrize("url", ["/api/v1/tokens/", "/api/v1/api-keys/", "/api/v1/webhook-endpoints/",
                                 "/api/v1/triggers/"])
def test_a_flood_of_long_unknown_keys_gets_a_bounded_answer(url, api_client_for, owner, workspace, active_agent):
    client = api_client_for(owner)
    body, model = _bodies(workspace, active_agent)[url]
    before = model.objects.count()
    flood = {f"{n:04d}" + "k" * 1000: 1 for n in range(300)}
    response = client.post(url, {**body, **flood}, format="json")
    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert 1 <= len(details) <= 20
    assert all(len(key) <= 100 for key in details)
    assert model.objects.count() == before


def test_a_trigger_update_names_why_a_fixed_field_is_refused(api_client_for, owner, workspace, active_agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="T", trigger_type="manual",
                             prompt="", config={})
    response = api_client_for(owner).patch(f"/api/v1/triggers/{trigger.pk}/", {"type": "api"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"type": ["A trigger keeps its type; create another trigger."]}


@pytest.mark.parametrize(("body", "field"), [
    ({"allow_self_approval": True, "colour": "red"}, "colour"),
    ({}, "allow_self_approval"),
    ({"allow_self_approval": "true"}, "allow_self_approval"),
    ([True], "non_field_errors"),
])
def test_approval_settings_refuse_what_they_do_not_take_by_name(body, field, api_client_for, owner, workspace):
    response = api_client_for(owner).patch(f"/api/v1/workspaces/{workspace.pk}/approval-settings", body,
                                           format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["details"]
    workspace.refresh_from_db()
    assert workspace.allow_self_approval is False


def test_approval_settings_name_an_unknown_key_like_every_other_endpoint(api_client_for, owner, workspace):
    response = api_client_for(owner).patch(f"/api/v1/workspaces/{workspace.pk}/approval-settings",
                                           {"allow_self_approval": True, "colour": "red"}, format="json")
    assert response.json()["error"]["details"] == {"colour": ["Unknown or read-only field."]}

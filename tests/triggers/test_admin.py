"""Triggers in the admin: created only through the API, their firings read-only."""

import pytest

from tenancy.models import Membership
from triggers.services import trigger_fire

pytestmark = pytest.mark.django_db


def test_the_trigger_page_shows_its_firings_and_identity_and_cannot_add(admin_client, make_trigger):
    trigger = make_trigger(name="Nightly")
    firing = trigger_fire(trigger=trigger, payload={"a": 1}, source="api:Nightly", dedupe_key="k1")
    page = admin_client.get(f"/admin/triggers/trigger/{trigger.pk}/change/").content.decode()
    assert "k1" in page and "api:Nightly" in page and trigger.run_as.user.username in page
    assert admin_client.get("/admin/triggers/trigger/add/").status_code == 403
    assert admin_client.get("/admin/triggers/triggerfiring/add/").status_code == 403
    firing_page = admin_client.get(f"/admin/triggers/triggerfiring/{firing.pk}/change/").content.decode()
    assert "api:Nightly" in firing_page and 'name="source"' not in firing_page  # shown, not editable
    assert admin_client.post(f"/admin/triggers/triggerfiring/{firing.pk}/delete/", {"post": "yes"}).status_code == 403


def test_a_bad_prompt_placeholder_is_explained(admin_client, make_trigger):
    trigger = make_trigger(name="Nightly")
    response = admin_client.post(f"/admin/triggers/trigger/{trigger.pk}/change/", {
        "name": "Nightly", "enabled": "on", "prompt": "{{ user.email }}", "config": "{}",
        "firings-TOTAL_FORMS": "0", "firings-INITIAL_FORMS": "0"})
    assert response.status_code == 200
    assert "The prompt has a placeholder River cannot fill" in response.content.decode()


def test_a_valid_edit_is_saved_as_the_typed_config(admin_client, admin_user, workspace, make_trigger):
    Membership.objects.create(workspace=workspace, user=admin_user, role="admin")  # edits bind it to them
    trigger = make_trigger(name="Load", trigger_type="threshold",
                           config={"expression": "cpu_percent > 90 for 5m"})
    response = admin_client.post(f"/admin/triggers/trigger/{trigger.pk}/change/", {
        "name": "Load", "prompt": "CPU is {{ payload.value }}",
        "config": '{"expression": "avg(cpu_percent)  >  80 for 10m", "cooldown_seconds": 60}',
        "firings-TOTAL_FORMS": "0", "firings-INITIAL_FORMS": "0"})
    assert response.status_code == 302
    trigger.refresh_from_db()
    assert trigger.enabled is False
    assert trigger.config == {"trigger_type": "threshold", "expression": "avg(cpu_percent) > 80 for 10m",
                              "cooldown_seconds": 60}


def test_keys_and_endpoints_never_show_their_secrets(admin_client, owner, workspace):
    from triggers.apikeys import api_key_issue
    from triggers.webhooks import webhook_endpoint_create

    issued = api_key_issue(created_by=owner, workspace=workspace, name="CRM")
    page = admin_client.get(f"/admin/triggers/apikey/{issued.key.pk}/change/").content.decode()
    assert "CRM" in page and issued.key.digest not in page and issued.plaintext not in page
    endpoint = webhook_endpoint_create(workspace=workspace, slug="desk", created_by=owner)
    page = admin_client.get(f"/admin/triggers/webhookendpoint/{endpoint.endpoint.pk}/change/").content.decode()
    assert "desk" in page and endpoint.secret not in page and endpoint.endpoint.secret_encrypted not in page
    admin_client.post("/admin/triggers/apikey/", {"action": "revoke", "_selected_action": [issued.key.pk]})
    issued.key.refresh_from_db()
    assert issued.key.revoked_at is not None

"""The triggers pages: the list with its latest firing, a form per type (errors at
their field, nothing half-saved), secrets shown once, enabling and disabling, firings."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tenancy.models import ServicePrincipal
from triggers.models import ApiKey, Trigger, TriggerFiring, WebhookEndpoint
from triggers.services import trigger_create, trigger_fire

pytestmark = pytest.mark.django_db


def _form(agent, **values):
    data = {"name": "T", "agent": str(agent.pk), "prompt": "", "run_as_role": "analyst", "enabled": "on"}
    data.update(values)
    return data


def test_the_list_shows_every_type_with_its_last_firing(client_for, owner, workspace, agent):
    api = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Nightly", trigger_type="api")
    trigger_create(actor=owner, workspace=workspace, agent=agent, name="Mornings", trigger_type="scheduled",
                   config={"cron": "0 8 * * 1-5"})
    trigger_fire(trigger=api, payload={}, source="api", dedupe_key="k")
    trigger_fire(trigger=api, payload={}, source="api", dedupe_key="k")
    page = client_for(owner).get("/triggers/").content.decode()
    assert "Nightly" in page and "Mornings" in page and "At 08:00, Monday through Friday" in page
    assert "Skipped" in page and "Duplicate" in page


def test_the_list_filters_and_is_bounded_at_many_firings(client_for, owner, workspace, agent):
    triggers = [trigger_create(actor=owner, workspace=workspace, agent=agent, name=f"Trig{i:02}", trigger_type="api")
                for i in range(30)]
    now = timezone.now()
    TriggerFiring.objects.bulk_create([
        TriggerFiring(trigger=triggers[i % 30], source="api", outcome="skipped", reason="filtered",
                      fired_at=now - timedelta(seconds=i)) for i in range(10_000)], batch_size=2000)
    client = client_for(owner)
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/triggers/?type=api&page=2")
    assert response.status_code == 200 and "Trig29" in response.content.decode()
    # The frame's Approvals badge reads the user's roles (it counts only requests they
    # may decide): a fixed cost per page, not per row.
    assert len(queries) <= 13, "\n".join(q["sql"][:150] for q in queries.captured_queries)
    assert "Trig00" not in client.get("/triggers/?q=Trig29").content.decode()
    assert client.get("/triggers/?type=telepathy").status_code == 400


def test_a_schedule_trigger_with_a_bad_cron_names_the_field_and_saves_nothing(client_for, owner, agent):
    response = client_for(owner).post("/triggers/new/?type=schedule",
                                      _form(agent, cron="every morning", timezone="Mars/Olympus"))
    page = response.content.decode()
    assert response.status_code == 400
    assert 'id="id_cron_error"' in page and 'id="id_timezone_error"' in page
    assert not Trigger.objects.exists() and not ServicePrincipal.objects.exists()


def test_a_schedule_trigger_is_saved_and_described(client_for, owner, agent):
    client = client_for(owner)
    response = client.post("/triggers/new/?type=schedule", _form(agent, name="Weekdays", cron="0 8 * * 1-5",
                                                                   timezone="Europe/Berlin"))
    trigger = Trigger.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/triggers/{trigger.pk}/"
    assert trigger.config["cron"] == "0 8 * * 1-5" and trigger.run_as.user.username
    assert "At 08:00, Monday through Friday" in client.get(response["Location"]).content.decode()
    assert client.get("/triggers/cron-words?cron=*/15+*+*+*+*").content.decode() == "Every 15 minutes."
    assert "Not a complete" in client.get("/triggers/cron-words?cron=*/15").content.decode()


def test_a_webhook_trigger_shows_its_new_endpoint_secret_once(client_for, owner, agent):
    client = client_for(owner)
    response = client.post("/triggers/new/?type=event", _form(
        agent, name="Tickets", endpoint="__new__", new_endpoint="zendesk", event_type="ticket.created",
        condition="payload.priority == 'high'"))
    page = response.content.decode()
    secret = re.search(r'<code id="webhook-secret">(whsec_[^<]+)</code>', page).group(1)
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    endpoint = WebhookEndpoint.objects.get()
    assert f"/api/v1/hooks/{endpoint.pk}" in page
    trigger = Trigger.objects.get()
    assert secret not in client.get(f"/triggers/{trigger.pk}/").content.decode()
    assert secret not in client.get("/triggers/").content.decode()


def test_a_bad_condition_leaves_no_endpoint_behind(client_for, owner, agent):
    response = client_for(owner).post("/triggers/new/?type=event", _form(
        agent, endpoint="__new__", new_endpoint="zendesk", event_type="ticket.created", condition="import os"))
    assert response.status_code == 400 and 'id="id_condition_error"' in response.content.decode()
    assert not WebhookEndpoint.objects.exists() and not Trigger.objects.exists()


def test_an_api_trigger_issues_a_key_shown_once(client_for, owner, agent):
    client = client_for(owner)
    response = client.post("/triggers/new/?type=api", _form(
        agent, name="From CRM", input_schema='{"type": "object"}', issue_key="on"))
    key = re.search(r'<code id="api-key">(rtk_[^<]+)</code>', response.content.decode()).group(1)
    assert ApiKey.objects.get().prefix in key
    trigger = Trigger.objects.get()
    assert key not in client.get(f"/triggers/{trigger.pk}/").content.decode()


def test_an_api_trigger_with_bad_schema_json_names_the_field(client_for, owner, agent):
    response = client_for(owner).post("/triggers/new/?type=api", _form(agent, input_schema="{oops"))
    assert response.status_code == 400 and 'id="id_input_schema_error"' in response.content.decode()
    assert not ApiKey.objects.exists()


def test_threshold_and_pipeline_triggers(client_for, owner, workspace, agent):
    from tests.factories import make_agent

    upstream = make_agent(workspace=workspace, owner=owner, name="Upstream")
    client = client_for(owner)
    bad = client.post("/triggers/new/?type=threshold", _form(agent, expression="cpu >", cooldown_seconds="60"))
    assert bad.status_code == 400 and 'id="id_expression_error"' in bad.content.decode()
    ok = client.post("/triggers/new/?type=threshold", _form(agent, name="Hot", expression="cpu_percent > 90 for 5m",
                                                              cooldown_seconds="60"))
    assert ok.status_code == 302
    chain = client.post("/triggers/new/?type=workflow", _form(agent, name="After", upstream_agent=str(upstream.pk),
                                                                on_statuses=["completed", "failed"]))
    assert chain.status_code == 302
    assert "Upstream" in client.get(chain["Location"]).content.decode()


def test_run_as_role_above_your_own_is_refused(client_for, editor, agent):
    response = client_for(editor).post("/triggers/new/?type=manual", _form(agent, run_as_role="admin"))
    assert response.status_code == 400 and not Trigger.objects.exists()


def test_enable_disable_and_the_firings_page(client_for, owner, workspace, agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Nightly", trigger_type="api")
    client = client_for(owner)
    client.post(f"/triggers/{trigger.pk}/enabled", {"enabled": "0"})
    trigger.refresh_from_db()
    assert not trigger.enabled
    trigger_fire(trigger=trigger, payload={}, source="api")
    page = client.get(f"/triggers/{trigger.pk}/").content.decode()
    assert "Trigger disabled" in page and "Enable</button>" in page
    TriggerFiring.objects.bulk_create([TriggerFiring(trigger=trigger, source="api", outcome="skipped",
                                                     reason="filtered") for _ in range(60)])
    assert "Page 3 of 3" in client.get(f"/triggers/{trigger.pk}/?page=3").content.decode()


def test_viewers_see_but_cannot_change(client_for, viewer, owner, workspace, agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Nightly", trigger_type="api")
    client = client_for(viewer)
    page = client.get(f"/triggers/{trigger.pk}/").content.decode()
    assert "Nightly" in page and "Disable</button>" not in page
    assert "New trigger" not in client.get("/triggers/").content.decode()
    assert client.post(f"/triggers/{trigger.pk}/enabled", {"enabled": "0"}).status_code == 403
    assert client.get("/triggers/new/").status_code == 403
    trigger.refresh_from_db()
    assert trigger.enabled


def test_outsiders_get_404(client_for, outsider, owner, workspace, agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Nightly", trigger_type="api")
    client = client_for(outsider)
    assert client.get(f"/triggers/{trigger.pk}/").status_code == 404
    assert client.post(f"/triggers/{trigger.pk}/enabled", {"enabled": "0"}).status_code == 404
    assert "Nightly" not in client.get("/triggers/").content.decode()
    # Their own form cannot name our agent.
    response = client.post("/triggers/new/?type=manual", _form(agent, name="Steal"))
    assert response.status_code == 400 and not Trigger.objects.filter(name="Steal").exists()


def test_anonymous_visitors_are_sent_to_sign_in(client):
    for url in ("/triggers/", "/triggers/new/", "/triggers/cron-words?cron=x"):
        assert "/accounts/login/" in client.get(url)["Location"]


def test_delete_removes_the_trigger_and_its_firings_and_keeps_its_runs(client_for, owner, workspace, agent):
    from django_celery_beat.models import PeriodicTask

    from executions.models import Execution

    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Mornings", trigger_type="scheduled",
                             config={"cron": "0 8 * * 1-5"})
    trigger_fire(trigger=trigger, payload={}, source="cron")
    started = Execution.objects.filter(trigger_id=trigger.pk).count()
    client = client_for(owner)
    assert f'action="/triggers/{trigger.pk}/delete"' in client.get(f"/triggers/{trigger.pk}/").content.decode()
    response = client.post(f"/triggers/{trigger.pk}/delete", follow=True)
    assert "Trigger Mornings is deleted" in response.content.decode()
    assert not Trigger.objects.filter(pk=trigger.pk).exists()
    assert not TriggerFiring.objects.exists() and not PeriodicTask.objects.filter(name__contains=str(trigger.pk))
    assert Execution.objects.filter(trigger_id=trigger.pk).count() == started
    assert client.post(f"/triggers/{trigger.pk}/delete").status_code == 404  # gone


def test_rotating_the_endpoint_secret_shows_the_new_one_once_and_keeps_the_old_for_the_grace(
        client_for, owner, agent):
    from django.utils import timezone
    from standardwebhooks.webhooks import Webhook

    from triggers.webhooks import SignatureRefused, webhook_verify

    def accepts(endpoint, secret: str) -> bool:
        now = timezone.now()
        headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(now.timestamp())),
                   "webhook-signature": Webhook(secret).sign("msg_1", now, "{}")}
        try:
            webhook_verify(endpoint=endpoint, headers=headers, body=b"{}")
        except SignatureRefused:
            return False
        return True

    client = client_for(owner)
    created = client.post("/triggers/new/?type=event", _form(
        agent, name="Tickets", endpoint="__new__", new_endpoint="zendesk", event_type="ticket.created"))
    old = re.search(r'<code id="webhook-secret">(whsec_[^<]+)</code>', created.content.decode()).group(1)
    trigger = Trigger.objects.get()
    assert "Rotate the secret" in client.get(f"/triggers/{trigger.pk}/").content.decode()
    response = client.post(f"/triggers/{trigger.pk}/endpoint/rotate", {"previous_valid_seconds": "3600"})
    page = response.content.decode()
    new = re.search(r'<code id="webhook-secret">(whsec_[^<]+)</code>', page).group(1)
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    assert new != old and "A new signing secret for endpoint zendesk" in page and "keeps working until" in page
    endpoint = WebhookEndpoint.objects.get()
    assert accepts(endpoint, new) and accepts(endpoint, old)  # the old one, for its hour of grace
    assert new not in client.get(f"/triggers/{trigger.pk}/").content.decode()
    # Rotating again with no grace: only the newest secret works.
    newest = re.search(r'<code id="webhook-secret">(whsec_[^<]+)</code>', client.post(
        f"/triggers/{trigger.pk}/endpoint/rotate", {"previous_valid_seconds": "0"}).content.decode()).group(1)
    endpoint.refresh_from_db()
    assert accepts(endpoint, newest) and not accepts(endpoint, new) and not accepts(endpoint, old)
    # A grace the form does not offer is refused; nothing changes.
    response = client.post(f"/triggers/{trigger.pk}/endpoint/rotate", {"previous_valid_seconds": "99999999"},
                           follow=True)
    assert "The secret was not rotated" in response.content.decode()
    endpoint.refresh_from_db()
    assert accepts(endpoint, newest)


def test_only_managers_of_the_workspace_delete_or_rotate(client_for, viewer, outsider, owner, workspace, agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Nightly", trigger_type="api")
    page = client_for(viewer).get(f"/triggers/{trigger.pk}/").content.decode()
    assert "Delete trigger" not in page
    assert client_for(viewer).post(f"/triggers/{trigger.pk}/delete").status_code == 403
    assert client_for(outsider).post(f"/triggers/{trigger.pk}/delete").status_code == 404
    assert client_for(outsider).post(f"/triggers/{trigger.pk}/endpoint/rotate",
                                     {"previous_valid_seconds": "0"}).status_code == 404
    # An API trigger has no endpoint to rotate.
    assert client_for(owner).post(f"/triggers/{trigger.pk}/endpoint/rotate",
                                  {"previous_valid_seconds": "0"}).status_code == 404
    assert Trigger.objects.filter(pk=trigger.pk).exists()


def test_a_webhook_trigger_page_creates_a_github_endpoint_without_showing_its_secret(client_for, owner, agent):
    from common.crypto import decrypt_text

    gh_secret = "github secret for the page"  # noqa: S105 - a test secret
    client = client_for(owner)
    response = client.post("/triggers/new/?type=event", _form(
        agent, name="Issues", endpoint="__new__", new_endpoint="repo", new_endpoint_scheme="github",
        new_endpoint_secret=gh_secret, event_type="issues"))
    page = response.content.decode()
    assert response.status_code == 200 and gh_secret not in page and 'id="webhook-secret"' not in page
    assert "X-Hub-Signature-256" in page
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.scheme == "github" and decrypt_text(endpoint.secret_encrypted) == gh_secret


def test_a_webhook_trigger_page_refuses_legacy_and_a_missing_stripe_secret(client_for, owner, agent):
    client = client_for(owner)
    legacy = client.post("/triggers/new/?type=event", _form(
        agent, endpoint="__new__", new_endpoint="old", new_endpoint_scheme="river_legacy", event_type="x"))
    assert legacy.status_code == 400 and 'id="id_new_endpoint_scheme_error"' in legacy.content.decode()
    stripe_page = client.post("/triggers/new/?type=event", _form(
        agent, endpoint="__new__", new_endpoint="pay", new_endpoint_scheme="stripe", event_type="x"))
    assert stripe_page.status_code == 400 and 'id="id_new_endpoint_secret_error"' in stripe_page.content.decode()
    assert not WebhookEndpoint.objects.exists() and not Trigger.objects.exists()


def test_rotating_a_stripe_endpoint_on_the_page_takes_the_rolled_secret(client_for, owner, workspace, agent):
    from common.crypto import decrypt_text
    from triggers.webhooks import webhook_endpoint_create

    webhook_endpoint_create(workspace=workspace, slug="pay", created_by=owner, scheme="stripe",
                            secret="whsec_" + "a1" * 16)
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Paid", trigger_type="event",
                             config={"endpoint": "pay", "event_type": "charge.succeeded"})
    client = client_for(owner)
    assert 'name="secret"' in client.get(f"/triggers/{trigger.pk}/").content.decode()
    refused = client.post(f"/triggers/{trigger.pk}/endpoint/rotate", {"previous_valid_seconds": "0"}, follow=True)
    assert "The secret was not rotated" in refused.content.decode()
    rolled = "whsec_" + "b2" * 16
    response = client.post(f"/triggers/{trigger.pk}/endpoint/rotate",
                           {"previous_valid_seconds": "0", "secret": rolled})
    assert response.status_code == 200 and rolled not in response.content.decode()
    assert decrypt_text(WebhookEndpoint.objects.get().secret_encrypted) == rolled

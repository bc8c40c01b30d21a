"""Event triggers through POST /api/v1/hooks/{endpoint}: signed deliveries fan out to
every matching trigger; conditions filter; redelivery is idempotent; anything not
verified is refused with nothing stored. Deliveries here use the river_legacy scheme
(X-River-Signature), which endpoints made before the schemes keep; the other schemes
are in test_webhook_schemes.py."""

import json
import time
from unittest import mock

import pytest
from rest_framework.test import APIClient

from common.crypto import decrypt_text
from executions.models import Execution
from executions.services.load import request_build
from tests.factories import make_agent
from triggers import webhooks
from triggers.models import TriggerFiring, WebhookEndpoint, WebhookScheme
from triggers.services import trigger_create, trigger_fire
from triggers.webhooks import signature_compute, webhook_endpoint_create, webhook_endpoint_rotate, webhook_refusals

pytestmark = pytest.mark.django_db


def legacy_endpoint(workspace, owner, slug):
    """An endpoint as the migration leaves one made before the schemes: river_legacy
    (no endpoint can be created with it any more)."""
    issued = webhook_endpoint_create(workspace=workspace, slug=slug, created_by=owner)
    WebhookEndpoint.objects.filter(pk=issued.endpoint.pk).update(scheme=WebhookScheme.RIVER_LEGACY)
    issued.endpoint.refresh_from_db()
    return issued.endpoint, issued.secret


@pytest.fixture
def endpoint(workspace, owner):
    return legacy_endpoint(workspace, owner, "zendesk")


def event_trigger(owner, workspace, agent, name, condition="", event_type="ticket.created"):
    return trigger_create(actor=owner, workspace=workspace, agent=agent, name=name, trigger_type="event",
                          prompt="Triage ticket {{ payload.id }}",
                          config={"endpoint": "zendesk", "event_type": event_type, "condition": condition})


def deliver(endpoint, secret, payload, *, t=None, headers=None, raw=None, signature=None):
    body = raw if raw is not None else json.dumps(payload).encode()
    t = int(time.time()) if t is None else t
    sent = {"HTTP_X_RIVER_SIGNATURE": signature if signature is not None else
            f"t={t},v1={signature_compute(secret=secret, timestamp=t, body=body)}"}
    sent.update(headers or {})
    return APIClient().post(f"/api/v1/hooks/{endpoint.pk}", data=body, content_type="application/json", **sent)


def nothing_stored():
    return not TriggerFiring.objects.exists() and not Execution.objects.exists()


def test_one_event_starts_every_matching_agent_each_its_own_run(owner, workspace, endpoint):
    ep, secret = endpoint
    agents = [make_agent(workspace=workspace, owner=owner, name=f"Agent {n}") for n in range(3)]
    triggers = [event_trigger(owner, workspace, agent, f"T{n}") for n, agent in enumerate(agents)]
    event_trigger(owner, workspace, agents[0], "Other type", event_type="ticket.closed")
    response = deliver(ep, secret, {"id": "evt_1", "type": "ticket.created", "priority": "high"})
    assert response.status_code == 202, response.json()
    started = response.json()["executions"]
    assert len(started) == 3
    runs = Execution.objects.filter(pk__in=started)
    assert {run.agent_id for run in runs} == {agent.pk for agent in agents}
    assert {run.trigger_id for run in runs} == {trigger.pk for trigger in triggers}
    for run in runs:
        context = request_build(run).trigger_context
        assert (context.trigger_type, context.trigger_source) == ("event", "webhook:zendesk")
        assert context.trigger_payload["priority"] == "high"
        assert run.input_prompt == "Triage ticket evt_1"
        assert run.requested_by_id == next(t.run_as.user_id for t in triggers if t.pk == run.trigger_id)


def test_conditions_filter_and_the_skip_is_logged(owner, workspace, endpoint, active_agent):
    ep, secret = endpoint
    trigger = event_trigger(owner, workspace, active_agent, "High only", condition="payload.priority == 'high'")
    low = deliver(ep, secret, {"id": "1", "type": "ticket.created", "priority": "low"})
    assert low.status_code == 202 and low.json() == {"executions": []}
    firing = TriggerFiring.objects.get(trigger=trigger)
    assert (firing.outcome, firing.reason) == ("skipped", "filtered")
    high = deliver(ep, secret, {"id": "2", "type": "ticket.created", "priority": "high"})
    assert len(high.json()["executions"]) == 1


def test_a_condition_that_errors_on_this_payload_filters(owner, workspace, endpoint, active_agent):
    ep, secret = endpoint
    event_trigger(owner, workspace, active_agent, "Numbers", condition="payload.amount > 10")
    response = deliver(ep, secret, {"id": "1", "type": "ticket.created", "amount": "lots"})
    assert response.json() == {"executions": []}
    assert TriggerFiring.objects.get().reason == "filtered"


def test_a_redelivery_starts_nothing(owner, workspace, endpoint, active_agent):
    ep, secret = endpoint
    event_trigger(owner, workspace, active_agent, "T")
    first = deliver(ep, secret, {"type": "ticket.created"}, headers={"HTTP_X_RIVER_EVENT_ID": "evt_9"})
    assert len(first.json()["executions"]) == 1
    again = deliver(ep, secret, {"type": "ticket.created"}, headers={"HTTP_X_RIVER_EVENT_ID": "evt_9"})
    assert again.status_code == 202 and again.json() == {"executions": []}
    assert Execution.objects.count() == 1
    assert list(TriggerFiring.objects.order_by("id").values_list("reason", flat=True)) == ["", "duplicate"]


def test_headers_win_over_body_fields(owner, workspace, endpoint, active_agent):
    ep, secret = endpoint
    event_trigger(owner, workspace, active_agent, "T")
    response = deliver(ep, secret, {"type": "ignored", "id": "body-id"},
                       headers={"HTTP_X_RIVER_EVENT_TYPE": "ticket.created", "HTTP_X_RIVER_EVENT_ID": "hdr-id"})
    assert len(response.json()["executions"]) == 1
    assert TriggerFiring.objects.get().dedupe_key == "hdr-id"


@pytest.mark.parametrize("case", ["bad", "missing", "stale", "future", "malformed", "other-body", "no-v1"])
def test_unverified_deliveries_are_401_and_store_nothing(owner, workspace, endpoint, active_agent, case):
    ep, secret = endpoint
    event_trigger(owner, workspace, active_agent, "T")
    payload = {"id": "1", "type": "ticket.created"}
    now = int(time.time())
    kwargs = {
        "bad": {"signature": f"t={now},v1={'0' * 64}"},
        "missing": {"signature": ""},
        "stale": {"t": now - 360},  # a minute past the 300 s window either way: the clock moves during the test
        "future": {"t": now + 360},
        "malformed": {"signature": "sha256=abc"},
        "other-body": {"signature": f"t={now},v1={signature_compute(secret=secret, timestamp=now, body=b'{}')}"},
        "no-v1": {"signature": f"t={now}"},
    }[case]
    before = webhook_refusals(endpoint=ep)
    response = deliver(ep, secret, payload, **kwargs)
    assert response.status_code == 401, response.content
    assert response.json()["error"]["code"] == "signature_invalid"
    assert response["WWW-Authenticate"].startswith("Signature")
    assert nothing_stored()
    assert webhook_refusals(endpoint=ep) == before + 1


def test_a_signature_with_another_endpoints_secret_is_refused(owner, workspace, endpoint, active_agent):
    ep, _ = endpoint
    _, other_secret = legacy_endpoint(workspace, owner, "other")
    event_trigger(owner, workspace, active_agent, "T")
    assert deliver(ep, other_secret, {"id": "1", "type": "ticket.created"}).status_code == 401
    assert nothing_stored()


@pytest.mark.parametrize(("raw", "field"), [(b"[1, 2]", "body"), (b"not json", "body"), (b'{"id": "1"}', "type"),
                                            (b'{"type": "ticket.created", "id": {"a": 1}}', "id"),
                                            (b'{"type": "ticket.created", "note": "a\\u0000b"}', "note"),
                                            (b'{"type": "ticket.created", "n": NaN}', "body"),
                                            (b'{"type": "ticket.created", "d": ' + b"[" * 70 + b"]" * 70 + b"}",
                                             "d.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0"
                                             ".0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0")])
def test_a_verified_but_malformed_body_is_400_and_stores_nothing(owner, workspace, endpoint, active_agent, raw,
                                                                 field):
    ep, secret = endpoint
    event_trigger(owner, workspace, active_agent, "T")
    response = deliver(ep, secret, None, raw=raw)
    assert response.status_code == 400
    assert field in response.json()["error"]["details"]
    assert nothing_stored()


def test_an_unknown_endpoint_is_404(endpoint):
    ep, secret = endpoint
    response = APIClient().post("/api/v1/hooks/00000000-0000-0000-0000-000000000000", data=b"{}",
                                content_type="application/json", HTTP_X_RIVER_SIGNATURE="t=1,v1=00")
    assert response.status_code == 404


def test_rotation_keeps_the_previous_secret_until_it_expires(owner, workspace, endpoint, active_agent):
    ep, old = endpoint
    event_trigger(owner, workspace, active_agent, "T")
    new = webhook_endpoint_rotate(endpoint=ep).secret
    assert new != old
    assert len(deliver(ep, old, {"id": "a", "type": "ticket.created"}).json()["executions"]) == 1
    assert len(deliver(ep, new, {"id": "b", "type": "ticket.created"}).json()["executions"]) == 1
    # Rotating again with no grace: only the newest secret works.
    newest = webhook_endpoint_rotate(endpoint=ep, previous_valid_for=__import__("datetime").timedelta(0)).secret
    assert deliver(ep, new, {"id": "c", "type": "ticket.created"}).status_code == 401
    assert deliver(ep, old, {"id": "d", "type": "ticket.created"}).status_code == 401
    assert deliver(ep, newest, {"id": "e", "type": "ticket.created"}).status_code == 202


def test_an_expired_previous_secret_is_refused(owner, workspace, endpoint, active_agent):
    from datetime import timedelta

    from django.utils import timezone

    ep, old = endpoint
    event_trigger(owner, workspace, active_agent, "T")
    webhook_endpoint_rotate(endpoint=ep)
    WebhookEndpoint.objects.filter(pk=ep.pk).update(previous_secret_expires_at=timezone.now() - timedelta(seconds=1))
    assert deliver(ep, old, {"id": "a", "type": "ticket.created"}).status_code == 401
    assert nothing_stored()


def test_one_triggers_failure_never_blocks_the_others(owner, workspace, endpoint):
    ep, secret = endpoint
    agents = [make_agent(workspace=workspace, owner=owner, name=f"A{n}") for n in range(3)]
    triggers = [event_trigger(owner, workspace, agent, f"T{n}") for n, agent in enumerate(agents)]
    real = trigger_fire

    def flaky(*, trigger, **kwargs):
        if trigger.pk == triggers[1].pk:
            raise RuntimeError("boom")
        return real(trigger=trigger, **kwargs)

    with mock.patch.object(webhooks, "trigger_fire", side_effect=flaky):
        response = deliver(ep, secret, {"id": "1", "type": "ticket.created"})
    assert response.status_code == 202
    assert set(Execution.objects.values_list("agent_id", flat=True)) == {agents[0].pk, agents[2].pk}


def test_an_inactive_agent_is_skipped_and_the_rest_start(owner, workspace, endpoint):
    from agents.models import Agent

    ep, secret = endpoint
    paused = make_agent(workspace=workspace, owner=owner, name="Paused", status=Agent.Status.PAUSED)
    live = make_agent(workspace=workspace, owner=owner, name="Live")
    event_trigger(owner, workspace, paused, "P")
    event_trigger(owner, workspace, live, "L")
    response = deliver(ep, secret, {"id": "1", "type": "ticket.created"})
    assert len(response.json()["executions"]) == 1
    assert set(TriggerFiring.objects.values_list("reason", flat=True)) == {"", "agent_inactive"}


# --- managing endpoints over REST ------------------------------------------------------------


def test_endpoint_secret_is_shown_once_and_stored_encrypted(api_client_for, editor, workspace):
    client = api_client_for(editor)
    created = client.post("/api/v1/webhook-endpoints/", {"workspace": workspace.pk, "slug": "desk"})
    assert created.status_code == 201, created.json()
    data = created.json()
    secret = data["secret"]
    assert secret.startswith("whsec_") and data["url"] == f"/api/v1/hooks/{data['id']}"
    row = WebhookEndpoint.objects.get(pk=data["id"])
    assert secret not in row.secret_encrypted and decrypt_text(row.secret_encrypted) == secret
    assert "secret" not in client.get(f"/api/v1/webhook-endpoints/{data['id']}/").json()
    assert all("secret" not in item for item in client.get("/api/v1/webhook-endpoints/").json()["results"])
    rotated = client.post(f"/api/v1/webhook-endpoints/{data['id']}/rotate", {"previous_valid_seconds": 60})
    assert rotated.status_code == 200
    assert rotated.json()["secret"] != secret and rotated.json()["previous_secret_active"] is True
    again = client.post("/api/v1/webhook-endpoints/", {"workspace": workspace.pk, "slug": "desk"})
    assert again.status_code == 400 and "slug" in again.json()["error"]["details"]
    bad = client.post("/api/v1/webhook-endpoints/", {"workspace": workspace.pk, "slug": "Not A Slug"})
    assert bad.status_code == 400 and "slug" in bad.json()["error"]["details"]


def test_event_triggers_must_name_an_endpoint_of_their_workspace(api_client_for, owner, workspace, active_agent):
    response = api_client_for(owner).post("/api/v1/triggers/", {
        "workspace": workspace.pk, "agent": str(active_agent.pk), "name": "T", "type": "event",
        "config": {"endpoint": "nowhere", "event_type": "ticket.created"}})
    assert response.status_code == 400 and "config.endpoint" in response.json()["error"]["details"]


def test_analyst_cannot_manage_endpoints_and_outsider_gets_404(api_client_for, member, outsider, workspace,
                                                               endpoint):
    ep, _ = endpoint
    assert api_client_for(member).post("/api/v1/webhook-endpoints/",
                                       {"workspace": workspace.pk, "slug": "x"}).status_code == 403
    assert api_client_for(member).post(f"/api/v1/webhook-endpoints/{ep.pk}/rotate").status_code == 403
    client = api_client_for(outsider)
    assert client.post("/api/v1/webhook-endpoints/", {"workspace": workspace.pk, "slug": "x"}).status_code == 404
    assert client.get("/api/v1/webhook-endpoints/").json()["results"] == []
    assert client.get(f"/api/v1/webhook-endpoints/{ep.pk}/").status_code == 404
    assert client.post(f"/api/v1/webhook-endpoints/{ep.pk}/rotate").status_code == 404
    assert client.delete(f"/api/v1/webhook-endpoints/{ep.pk}/").status_code == 404
    assert WebhookEndpoint.objects.filter(pk=ep.pk).exists()


def test_editor_deletes_an_endpoint(api_client_for, editor, endpoint):
    ep, _ = endpoint
    assert api_client_for(editor).delete(f"/api/v1/webhook-endpoints/{ep.pk}/").status_code == 204
    assert not WebhookEndpoint.objects.exists()

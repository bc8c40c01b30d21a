"""Deliveries are signed whole: each endpoint scheme (Standard Webhooks, Stripe,
GitHub) accepts what the real sender's own code signs, refuses any change to the id,
the timestamp, the type or the body with a 401 and nothing stored, and deduplicates by
the delivery id. The senders are the ``standardwebhooks`` and ``stripe`` packages
themselves; GitHub's is its documented algorithm."""

import hashlib
import hmac
import json
import time
from datetime import timedelta

import pytest
import stripe
from django.utils import timezone
from rest_framework.test import APIClient
from standardwebhooks.webhooks import Webhook

from common.crypto import decrypt_text
from executions.models import Execution
from triggers.models import TriggerFiring, WebhookDelivery, WebhookEndpoint, WebhookScheme
from triggers.services import trigger_create
from triggers.webhooks import webhook_endpoint_create, webhook_endpoint_rotate, webhook_refusals

pytestmark = pytest.mark.django_db

STRIPE_SECRET = "whsec_" + "a1B2c3D4" * 4  # noqa: S105 - a test secret
GITHUB_SECRET = "It's a Secret to Everybody"  # noqa: S105 - the example of GitHub's documentation


def event_trigger(owner, workspace, agent, name, *, endpoint, event_type):
    return trigger_create(actor=owner, workspace=workspace, agent=agent, name=name, trigger_type="event",
                          prompt="Look at {{ payload.id }}",
                          config={"endpoint": endpoint, "event_type": event_type})


def post(endpoint, body: bytes, **headers):
    return APIClient().post(f"/api/v1/hooks/{endpoint.pk}", data=body, content_type="application/json", **headers)


def nothing_stored():
    return not TriggerFiring.objects.exists() and not Execution.objects.exists()


def refused(response, ep, before, field=None):
    """A 401 that names the header at fault, nothing stored, and counted."""
    assert response.status_code == 401, response.content
    assert response.json()["error"]["code"] == "signature_invalid"
    if field:
        assert field in response.json()["error"]["details"]
    assert nothing_stored()
    assert webhook_refusals(endpoint=ep) == before + 1
    return True


# --- Standard Webhooks ---------------------------------------------------------------------------


@pytest.fixture
def standard(workspace, owner, active_agent):
    issued = webhook_endpoint_create(workspace=workspace, slug="billing", created_by=owner)
    event_trigger(owner, workspace, active_agent, "Paid", endpoint="billing", event_type="invoice.paid")
    return issued.endpoint, issued.secret


def standard_body(event_type="invoice.paid", data=None) -> str:
    return json.dumps({"type": event_type, "timestamp": "2026-01-01T00:00:00Z", "data": data or {"id": "in_1"}})


def standard_headers(secret, msg_id, body: str, at=None) -> dict:
    at = at or timezone.now()
    return {"HTTP_WEBHOOK_ID": msg_id, "HTTP_WEBHOOK_TIMESTAMP": str(int(at.timestamp())),
            "HTTP_WEBHOOK_SIGNATURE": Webhook(secret).sign(msg_id, at, body)}


def test_new_endpoints_are_standard_with_a_whsec_base64_secret(standard):
    ep, secret = standard
    assert ep.scheme == WebhookScheme.STANDARD
    assert secret.startswith("whsec_") and 24 <= len(Webhook(secret)._whsecret) <= 32
    assert decrypt_text(WebhookEndpoint.objects.get(pk=ep.pk).secret_encrypted) == secret


def test_a_standard_webhooks_delivery_starts_a_run_with_data_as_payload(standard):
    ep, secret = standard
    body = standard_body(data={"id": "in_7", "amount": 12})
    response = post(ep, body.encode(), **standard_headers(secret, "msg_1", body))
    assert response.status_code == 202, response.content
    assert len(response.json()["executions"]) == 1
    firing = TriggerFiring.objects.get()
    assert firing.dedupe_key == "msg_1"
    assert Execution.objects.get().input_prompt == "Look at in_7"


def test_the_same_webhook_id_again_starts_nothing(standard):
    ep, secret = standard
    body = standard_body()
    assert len(post(ep, body.encode(), **standard_headers(secret, "msg_1", body)).json()["executions"]) == 1
    again = post(ep, body.encode(), **standard_headers(secret, "msg_1", body))
    assert again.status_code == 202 and again.json() == {"executions": []}
    assert Execution.objects.count() == 1
    assert TriggerFiring.objects.filter(reason="duplicate").count() == 1


@pytest.mark.parametrize("tamper", ["body", "id", "timestamp", "type", "stale", "future", "wrong-secret",
                                    "missing-id", "missing-timestamp", "missing-signature", "not-base64",
                                    "only-v2", "garbage-timestamp"])
def test_any_change_to_a_standard_delivery_is_401_and_stores_nothing(standard, tamper):
    ep, secret = standard
    body = standard_body()
    headers = standard_headers(secret, "msg_1", body)
    sent = body
    now = timezone.now()
    if tamper == "body":
        sent = standard_body(data={"id": "in_2"})
    elif tamper == "id":
        headers["HTTP_WEBHOOK_ID"] = "msg_2"
    elif tamper == "timestamp":
        headers["HTTP_WEBHOOK_TIMESTAMP"] = str(int(headers["HTTP_WEBHOOK_TIMESTAMP"]) + 1)
    elif tamper == "type":
        sent = standard_body(event_type="invoice.voided")
    elif tamper in ("stale", "future"):
        # Six minutes either way: past the 300 s tolerance even as the test's clock moves.
        at = now + timedelta(minutes=-6 if tamper == "stale" else 6)
        headers = standard_headers(secret, "msg_1", body, at=at)
    elif tamper == "wrong-secret":
        headers = standard_headers("whsec_" + "QUJD" * 8, "msg_1", body)
    elif tamper.startswith("missing-"):
        del headers[f"HTTP_WEBHOOK_{tamper.removeprefix('missing-').upper()}"]
    elif tamper == "not-base64":
        headers["HTTP_WEBHOOK_SIGNATURE"] = "v1,@@not base64@@"
    elif tamper == "only-v2":
        headers["HTTP_WEBHOOK_SIGNATURE"] = headers["HTTP_WEBHOOK_SIGNATURE"].replace("v1,", "v2,")
    elif tamper == "garbage-timestamp":
        headers["HTTP_WEBHOOK_TIMESTAMP"] = "1e9"
    before = webhook_refusals(endpoint=ep)
    assert refused(post(ep, sent.encode(), **headers), ep, before)


def test_one_valid_entry_among_several_signatures_suffices(standard):
    ep, secret = standard
    body = standard_body()
    headers = standard_headers(secret, "msg_1", body)
    other = Webhook("whsec_" + "QUJD" * 8).sign("msg_1", timezone.now(), body)
    headers["HTTP_WEBHOOK_SIGNATURE"] = f"{other} v1a,AAAA {headers['HTTP_WEBHOOK_SIGNATURE']}"
    assert post(ep, body.encode(), **headers).status_code == 202


def test_a_rotated_standard_secret_works_during_its_grace_and_not_after(standard):
    ep, old = standard
    new = webhook_endpoint_rotate(endpoint=ep, previous_valid_for=timedelta(hours=1)).secret
    assert new.startswith("whsec_") and new != old
    for n, secret in enumerate((old, new)):
        body = standard_body(data={"id": f"in_{n}"})
        assert post(ep, body.encode(), **standard_headers(secret, f"msg_{n}", body)).status_code == 202
    WebhookEndpoint.objects.filter(pk=ep.pk).update(previous_secret_expires_at=timezone.now() - timedelta(seconds=1))
    TriggerFiring.objects.all().delete()
    Execution.objects.all().delete()
    body = standard_body(data={"id": "in_9"})
    before = webhook_refusals(endpoint=ep)
    assert refused(post(ep, body.encode(), **standard_headers(old, "msg_9", body)), ep, before,
                   "webhook-signature")


@pytest.mark.parametrize(("body", "field"), [('{"type": "invoice.paid"}', "data"),
                                             ('{"type": "invoice.paid", "data": [1]}', "data"),
                                             ('{"data": {"id": 1}}', "type"),
                                             ('[{"type": "invoice.paid"}]', "body"),
                                             ('{"type": "invoice.paid", "data": {"n": NaN}}', "body")])
def test_a_verified_standard_body_without_type_or_data_is_400(standard, body, field):
    ep, secret = standard
    response = post(ep, body.encode(), **standard_headers(secret, "msg_1", body))
    assert response.status_code == 400 and field in response.json()["error"]["details"]
    assert nothing_stored()


# --- the two attacks of the issue, on every non-legacy scheme -----------------------------------


def test_a_captured_standard_delivery_replayed_with_a_new_id_starts_nothing(standard):
    ep, secret = standard
    body = standard_body()
    captured = standard_headers(secret, "msg_1", body)
    assert len(post(ep, body.encode(), **captured).json()["executions"]) == 1
    for n in range(3):
        before = webhook_refusals(endpoint=ep)
        replay = post(ep, body.encode(), **{**captured, "HTTP_WEBHOOK_ID": f"msg_new_{n}"})
        assert replay.status_code == 401 and webhook_refusals(endpoint=ep) == before + 1
    assert Execution.objects.count() == 1


def test_a_captured_standard_delivery_cannot_fire_another_type(standard, owner, workspace):
    from tests.factories import make_agent

    ep, secret = standard
    other = make_agent(workspace=workspace, owner=owner, name="Refunds")
    event_trigger(owner, workspace, other, "Voided", endpoint="billing", event_type="invoice.voided")
    body = standard_body()
    captured = standard_headers(secret, "msg_1", body)
    assert post(ep, body.encode(), **captured).status_code == 202
    # The type lives in the signed body; the old X-River-Event-Type header is ignored.
    swapped = post(ep, body.encode(), **captured, HTTP_X_RIVER_EVENT_TYPE="invoice.voided")
    assert swapped.json() == {"executions": []}
    retyped = standard_body(event_type="invoice.voided")
    assert post(ep, retyped.encode(), **captured).status_code == 401
    assert not Execution.objects.filter(agent=other).exists()


# --- Stripe --------------------------------------------------------------------------------------


@pytest.fixture
def stripe_endpoint(workspace, owner, active_agent):
    issued = webhook_endpoint_create(workspace=workspace, slug="stripe", created_by=owner,
                                     scheme=WebhookScheme.STRIPE, secret=STRIPE_SECRET)
    event_trigger(owner, workspace, active_agent, "Charged", endpoint="stripe", event_type="charge.succeeded")
    assert issued.secret is None  # supplied by the admin: never shown back
    return issued.endpoint


def stripe_event(event_id="evt_1", event_type="charge.succeeded") -> str:
    return json.dumps({"id": event_id, "object": "event", "type": event_type,
                       "data": {"object": {"id": "ch_1", "amount": 500}}})


def stripe_header(body: str, secret=STRIPE_SECRET, timestamp=None) -> str:
    return stripe.WebhookSignature.generate_signature_header(body, secret, timestamp=timestamp)


def test_a_delivery_signed_by_stripes_own_helper_is_accepted(stripe_endpoint):
    body = stripe_event()
    header = stripe_header(body)
    assert stripe.Webhook.construct_event(body, header, STRIPE_SECRET).type == "charge.succeeded"  # the sender agrees
    response = post(stripe_endpoint, body.encode(), HTTP_STRIPE_SIGNATURE=header)
    assert response.status_code == 202, response.content
    assert len(response.json()["executions"]) == 1
    assert TriggerFiring.objects.get().dedupe_key == "evt_1"
    assert Execution.objects.get().input_prompt == "Look at evt_1"  # the payload is the whole event


def test_a_stripe_redelivery_of_the_same_event_starts_nothing(stripe_endpoint):
    body = stripe_event()
    assert len(post(stripe_endpoint, body.encode(), HTTP_STRIPE_SIGNATURE=stripe_header(body)).json()[
        "executions"]) == 1
    again = post(stripe_endpoint, body.encode(), HTTP_STRIPE_SIGNATURE=stripe_header(body))
    assert again.status_code == 202 and again.json() == {"executions": []}
    assert Execution.objects.count() == 1


@pytest.mark.parametrize("tamper", ["body", "id", "type", "stale", "future", "wrong-secret", "missing",
                                    "no-v1", "no-t", "v0-only"])
def test_any_change_to_a_stripe_delivery_is_401_and_stores_nothing(stripe_endpoint, tamper):
    body = stripe_event()
    now = int(time.time())
    header = stripe_header(body, timestamp=now)
    sent = body
    if tamper in ("body", "id", "type"):
        sent = {"body": stripe_event().replace("500", "900"), "id": stripe_event(event_id="evt_2"),
                "type": stripe_event(event_type="charge.refunded")}[tamper]
    elif tamper in ("stale", "future"):
        header = stripe_header(body, timestamp=now + (-360 if tamper == "stale" else 360))
    elif tamper == "wrong-secret":
        header = stripe_header(body, secret="whsec_" + "z" * 32)
    elif tamper == "missing":
        header = ""
    elif tamper == "no-v1":
        header = f"t={now}"
    elif tamper == "no-t":
        header = header.split(",", 1)[1]
    elif tamper == "v0-only":
        header = header.replace("v1=", "v0=")
    before = webhook_refusals(endpoint=stripe_endpoint)
    headers = {"HTTP_STRIPE_SIGNATURE": header} if header else {}
    assert refused(post(stripe_endpoint, sent.encode(), **headers), stripe_endpoint, before, "Stripe-Signature")


def test_a_rolled_stripe_secret_is_supplied_and_both_work_during_the_grace(stripe_endpoint):
    rolled = "whsec_" + "R0lled99" * 4
    issued = webhook_endpoint_rotate(endpoint=stripe_endpoint, previous_valid_for=timedelta(hours=1), secret=rolled)
    assert issued.secret is None
    for n, secret in enumerate((STRIPE_SECRET, rolled)):
        body = stripe_event(event_id=f"evt_{n}")
        assert post(stripe_endpoint, body.encode(), HTTP_STRIPE_SIGNATURE=stripe_header(body, secret)
                    ).status_code == 202


# --- GitHub --------------------------------------------------------------------------------------


@pytest.fixture
def github(workspace, owner, active_agent):
    issued = webhook_endpoint_create(workspace=workspace, slug="repo", created_by=owner,
                                     scheme=WebhookScheme.GITHUB, secret=GITHUB_SECRET)
    event_trigger(owner, workspace, active_agent, "Issues", endpoint="repo", event_type="issues")
    return issued.endpoint


def github_signature(body: bytes, secret=GITHUB_SECRET) -> str:
    """GitHub's documented algorithm: sha256= and the hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def github_post(ep, body: bytes, *, delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958", event="issues", signature=None):
    headers = {"HTTP_X_GITHUB_DELIVERY": delivery, "HTTP_X_GITHUB_EVENT": event,
               "HTTP_X_HUB_SIGNATURE_256": signature if signature is not None else github_signature(body)}
    return post(ep, body, **{key: value for key, value in headers.items() if value})


GITHUB_BODY = json.dumps({"action": "opened", "issue": {"id": 1, "title": "Crash"}}).encode()


def test_githubs_documented_example_signature_verifies(github):
    # docs.github.com "Validating webhook deliveries": secret and payload of the example, its signature.
    body = b"Hello, World!"
    documented = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert github_signature(body) == documented
    # River verifies it (then refuses the body, which is not JSON, with a 400, not a 401).
    response = github_post(github, body, signature=documented)
    assert response.status_code == 400 and "body" in response.json()["error"]["details"]


def test_a_github_delivery_starts_a_run_and_its_redelivery_nothing(github):
    response = github_post(github, GITHUB_BODY)
    assert response.status_code == 202 and len(response.json()["executions"]) == 1
    assert TriggerFiring.objects.get().dedupe_key == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    again = github_post(github, GITHUB_BODY)  # GitHub's redelivery: same body, same X-GitHub-Delivery
    assert again.status_code == 202 and again.json() == {"executions": []}
    assert Execution.objects.count() == 1


def test_a_captured_github_body_replayed_with_a_new_delivery_id_is_refused(github):
    assert github_post(github, GITHUB_BODY).status_code == 202
    before = webhook_refusals(endpoint=github)
    replay = github_post(github, GITHUB_BODY, delivery="11111111-2222-3333-4444-555555555555")
    assert replay.status_code == 401 and "X-GitHub-Delivery" in replay.json()["error"]["details"]
    assert webhook_refusals(endpoint=github) == before + 1
    assert Execution.objects.count() == 1


def test_a_captured_github_body_sent_as_another_event_fires_nothing(github, owner, workspace):
    from tests.factories import make_agent

    other = make_agent(workspace=workspace, owner=owner, name="Deployer")
    event_trigger(owner, workspace, other, "Pushes", endpoint="repo", event_type="push")
    assert github_post(github, GITHUB_BODY).status_code == 202
    for delivery in ("72d3162e-cc78-11e3-81ab-4c9367dc0958", "99999999-0000-0000-0000-000000000000"):
        swapped = github_post(github, GITHUB_BODY, event="push", delivery=delivery)
        assert swapped.status_code == 401
    assert not Execution.objects.filter(agent=other).exists()
    assert WebhookDelivery.objects.get().event_type == "issues"


def test_the_github_body_record_expires_after_its_window(github):
    from triggers.webhooks import GITHUB_DELIVERY_WINDOW

    assert github_post(github, GITHUB_BODY).status_code == 202
    WebhookDelivery.objects.update(received_at=timezone.now() - GITHUB_DELIVERY_WINDOW - timedelta(minutes=1))
    other_body = json.dumps({"action": "closed", "issue": {"id": 2}}).encode()
    assert github_post(github, other_body, delivery="d-2").status_code == 202
    assert list(WebhookDelivery.objects.values_list("delivery_id", flat=True)) == ["d-2"]


@pytest.mark.parametrize("tamper", ["body", "wrong-secret", "missing", "sha1", "not-hex"])
def test_an_unverified_github_delivery_is_401_and_stores_nothing(github, tamper):
    body, signature = GITHUB_BODY, github_signature(GITHUB_BODY)
    if tamper == "body":
        body = GITHUB_BODY.replace(b"Crash", b"Fine!")
    elif tamper == "wrong-secret":
        signature = github_signature(GITHUB_BODY, "another secret of sixteen")
    elif tamper == "missing":
        signature = ""
    elif tamper == "sha1":
        signature = "sha1=" + hmac.new(GITHUB_SECRET.encode(), GITHUB_BODY, hashlib.sha1).hexdigest()
    elif tamper == "not-hex":
        signature = "sha256=" + "z" * 64
    before = webhook_refusals(endpoint=github)
    assert refused(github_post(github, body, signature=signature), github, before, "X-Hub-Signature-256")
    assert not WebhookDelivery.objects.exists()


@pytest.mark.parametrize(("headers", "field"), [({"event": ""}, "X-GitHub-Event"),
                                                ({"event": "Issues; drop"}, "X-GitHub-Event"),
                                                ({"delivery": ""}, "X-GitHub-Delivery"),
                                                ({"delivery": "has space"}, "X-GitHub-Delivery")])
def test_a_github_delivery_without_event_or_id_is_400(github, headers, field):
    response = github_post(github, GITHUB_BODY, **headers)
    assert response.status_code == 400 and field in response.json()["error"]["details"]
    assert nothing_stored() and not WebhookDelivery.objects.exists()


# --- managing schemes over REST ------------------------------------------------------------------


def test_the_api_creates_each_scheme_and_never_shows_a_supplied_secret(api_client_for, editor, workspace):
    client = api_client_for(editor)
    made = client.post("/api/v1/webhook-endpoints/", {"workspace": workspace.pk, "slug": "a"}, format="json")
    assert made.status_code == 201 and made.json()["scheme"] == "standard"
    assert made.json()["secret"].startswith("whsec_")
    gh = client.post("/api/v1/webhook-endpoints/", {"workspace": workspace.pk, "slug": "b", "scheme": "github",
                                                    "secret": GITHUB_SECRET}, format="json")
    assert gh.status_code == 201 and gh.json()["scheme"] == "github" and gh.json()["secret"] is None
    assert GITHUB_SECRET not in json.dumps(client.get("/api/v1/webhook-endpoints/").json())
    assert decrypt_text(WebhookEndpoint.objects.get(slug="b").secret_encrypted) == GITHUB_SECRET


@pytest.mark.parametrize(("body", "field"), [
    ({"scheme": "river_legacy"}, "scheme"),
    ({"scheme": "svix"}, "scheme"),
    ({"scheme": "github"}, "secret"),
    ({"scheme": "github", "secret": "short"}, "secret"),
    ({"scheme": "github", "secret": "sixteen chars ok\n"}, "secret"),
    ({"scheme": "stripe", "secret": "sk_live_notawebhooksecret"}, "secret"),
    ({"scheme": "standard", "secret": "whsec_" + "QUJD" * 8}, "secret"),
    ({"scheme": ["standard"]}, "scheme"),
])
def test_bad_scheme_or_secret_at_creation_is_400_naming_it(api_client_for, editor, workspace, body, field):
    response = api_client_for(editor).post("/api/v1/webhook-endpoints/",
                                           {"workspace": workspace.pk, "slug": "x", **body}, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["details"]
    assert not WebhookEndpoint.objects.exists()


def test_changing_the_scheme_replaces_the_secret_and_legacy_cannot_be_chosen(api_client_for, editor, member,
                                                                           outsider, standard):
    ep, old = standard
    url = f"/api/v1/webhook-endpoints/{ep.pk}/"
    assert api_client_for(member).patch(url, {"scheme": "github", "secret": GITHUB_SECRET},
                                        format="json").status_code == 403
    assert api_client_for(outsider).patch(url, {"scheme": "github", "secret": GITHUB_SECRET},
                                          format="json").status_code == 404
    client = api_client_for(editor)
    legacy = client.patch(url, {"scheme": "river_legacy"}, format="json")
    assert legacy.status_code == 400 and "scheme" in legacy.json()["error"]["details"]
    same = client.patch(url, {"scheme": "standard"}, format="json")
    assert same.status_code == 400 and "scheme" in same.json()["error"]["details"]
    assert client.patch(url, {"scheme": "github"}, format="json").status_code == 400
    ep.refresh_from_db()
    assert ep.scheme == "standard" and decrypt_text(ep.secret_encrypted) == old
    changed = client.patch(url, {"scheme": "github", "secret": GITHUB_SECRET}, format="json")
    assert changed.status_code == 200 and changed.json()["scheme"] == "github" and changed.json()["secret"] is None
    ep.refresh_from_db()
    assert decrypt_text(ep.secret_encrypted) == GITHUB_SECRET and not ep.previous_secret_encrypted
    back = client.patch(url, {"scheme": "standard"}, format="json")
    assert back.status_code == 200 and back.json()["secret"].startswith("whsec_")


def test_rotating_a_github_endpoint_needs_the_new_secret(api_client_for, editor, github):
    client = api_client_for(editor)
    url = f"/api/v1/webhook-endpoints/{github.pk}/rotate"
    missing = client.post(url, {}, format="json")
    assert missing.status_code == 400 and "secret" in missing.json()["error"]["details"]
    rotated = client.post(url, {"secret": "a brand new secret, 2026", "previous_valid_seconds": 0}, format="json")
    assert rotated.status_code == 200 and rotated.json()["secret"] is None
    assert github_post(github, GITHUB_BODY).status_code == 401
    assert github_post(github, GITHUB_BODY, signature=github_signature(GITHUB_BODY, "a brand new secret, 2026")
                       ).status_code == 202


def test_a_standard_endpoint_refuses_a_supplied_secret_at_rotation(api_client_for, editor, standard):
    ep, _ = standard
    response = api_client_for(editor).post(f"/api/v1/webhook-endpoints/{ep.pk}/rotate",
                                           {"secret": "whsec_" + "QUJD" * 8}, format="json")
    assert response.status_code == 400 and "secret" in response.json()["error"]["details"]


def test_the_migration_leaves_existing_endpoints_on_river_legacy():
    """The column is added with river_legacy as the default (rows that exist take it),
    then the default becomes standard for new rows."""
    import importlib

    from django.db import migrations as m

    migration = importlib.import_module("triggers.migrations.0005_webhook_schemes").Migration
    added, altered = [op for op in migration.operations if getattr(op, "name", "") == "scheme"]
    assert isinstance(added, m.AddField) and added.field.default == "river_legacy"
    assert isinstance(altered, m.AlterField) and altered.field.default == "standard"

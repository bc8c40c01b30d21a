"""Trigger firings and webhook refusals reach /metrics with bounded labels
(docs/observability.md#metrics)."""

from __future__ import annotations

import base64
import time

import pytest

from tests.telemetry.test_metrics import open_metrics, scrape, value  # noqa: F401 - fixture
from triggers.models import Trigger
from triggers.services import trigger_fire
from triggers.webhooks import SignatureRefused, webhook_verify

pytestmark = pytest.mark.django_db


def test_a_started_and_a_skipped_firing_are_counted_by_outcome_and_reason(
        client, open_metrics, make_trigger, django_capture_on_commit_callbacks):  # noqa: F811
    trigger = make_trigger()
    started = {"trigger_type": "manual", "outcome": "started", "reason": "none"}
    disabled = {"trigger_type": "manual", "outcome": "skipped", "reason": "disabled"}
    before = scrape(client)

    with django_capture_on_commit_callbacks(execute=True):
        trigger_fire(trigger=trigger, payload={"a": 1}, source="test")
    Trigger.objects.filter(pk=trigger.pk).update(enabled=False)
    with django_capture_on_commit_callbacks(execute=True):
        trigger_fire(trigger=trigger, payload={"a": 1}, source="test")
    after = scrape(client)

    assert value(after, "river_trigger_firings_total", **started) - value(before, "river_trigger_firings_total",
                                                                          **started) == 1
    assert value(after, "river_trigger_firings_total", **disabled) - value(before, "river_trigger_firings_total",
                                                                           **disabled) == 1


def test_a_refused_webhook_signature_is_counted_by_reason_never_by_its_text(client, open_metrics, zendesk):  # noqa: F811
    before = scrape(client)
    body = b'{"type": "ticket.created"}'
    with pytest.raises(SignatureRefused):
        webhook_verify(endpoint=zendesk, body=body, headers={  # Standard Webhooks, the endpoint's scheme
            "webhook-id": "msg_1", "webhook-timestamp": str(int(time.time())),
            "webhook-signature": "v1," + base64.b64encode(b"\0" * 32).decode()})
    with pytest.raises(SignatureRefused):
        webhook_verify(endpoint=zendesk, body=body, headers={
            "webhook-id": "msg_2", "webhook-timestamp": str(int(time.time())), "webhook-signature": "garbage <script>"})
    after = scrape(client)

    def delta(reason):
        return value(after, "river_webhook_verification_failures_total", reason=reason) \
            - value(before, "river_webhook_verification_failures_total", reason=reason)

    assert delta("bad_signature") == 1
    assert delta("malformed") == 1
    assert "garbage" not in str(after)

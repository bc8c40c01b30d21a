"""Threshold triggers: samples ingested in batches, a rule that must hold over a window
the samples cover (every sample, or their average), one firing per cooldown for a
sustained breach, concurrent ingests firing once, old samples pruned."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.db import connection
from django.test import override_settings

from executions.models import Execution
from executions.services.load import request_build
from triggers import tasks
from triggers.metrics import MAX_SAMPLES, metrics_ingest
from triggers.models import MetricSample, TriggerFiring

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock():
    """Server time, moved by the test (ingest, windows and cooldown all read it)."""
    fake = Clock(T0)
    with mock.patch("django.utils.timezone.now", fake), \
            mock.patch("executions.tasks.run_segment.delay"), mock.patch("executions.tasks.post_process.delay"):
        yield fake


@pytest.fixture
def cpu_trigger(make_trigger):
    return make_trigger(name="cpu-hot", trigger_type="threshold", prompt="CPU is {{ payload.value }}",
                        config={"expression": "cpu_percent > 90 for 5m", "cooldown_seconds": 900})


def at(minutes_ago: float, value: float, name: str = "cpu_percent", **labels) -> dict:
    sample = {"name": name, "value": value, "timestamp": (T0 - timedelta(minutes=minutes_ago)).isoformat()}
    if labels:
        sample["labels"] = labels
    return sample


def started(trigger) -> list[TriggerFiring]:
    return list(TriggerFiring.objects.filter(trigger=trigger, outcome="started"))


def test_a_breach_held_over_the_whole_window_fires_with_the_normalized_request(workspace, cpu_trigger, clock):
    result = metrics_ingest(workspace=workspace, samples=[at(6, 95, host="web-1"), at(4, 97, host="web-1"),
                                                          at(2, 96, host="web-1"), at(0, 93, host="web-1")])
    assert result.accepted == 4
    [firing] = result.firings
    assert firing.outcome == "started"
    execution = Execution.objects.get(pk=firing.execution_id)
    assert (execution.trigger_type, execution.trigger_source) == ("threshold", "threshold:cpu-hot")
    assert execution.input_prompt == "CPU is 93.0"
    payload = request_build(execution).trigger_context.trigger_payload
    assert payload["metric"] == "cpu_percent" and payload["labels"] == {"host": "web-1"}
    assert payload["expression"] == "cpu_percent > 90 for 5m" and payload["samples"] == 4
    assert (payload["min"], payload["max"]) == (93.0, 97.0)
    assert payload["window"] == {"seconds": 300, "end": T0.isoformat(),
                                 "start": (T0 - timedelta(minutes=5)).isoformat()}


def test_one_sample_under_the_threshold_inside_the_window_breaks_it(workspace, cpu_trigger, clock):
    result = metrics_ingest(workspace=workspace, samples=[at(6, 95), at(3, 85), at(0, 99)])
    assert result.firings == [] and not TriggerFiring.objects.exists()


def test_samples_that_do_not_cover_the_window_do_not_fire(workspace, cpu_trigger, clock):
    metrics_ingest(workspace=workspace, samples=[at(4, 99), at(2, 99), at(0, 99)])
    assert not TriggerFiring.objects.exists()


def test_the_value_in_effect_when_the_window_opened_counts(workspace, cpu_trigger, clock):
    metrics_ingest(workspace=workspace, samples=[at(8, 95), at(5.5, 40), at(4, 99), at(0, 99)])
    assert not TriggerFiring.objects.exists()


def test_an_average_rule_fires_on_the_window_average(workspace, make_trigger, clock):
    trigger = make_trigger(name="slow", trigger_type="threshold",
                           config={"expression": "avg(latency_ms) > 500 for 10m", "cooldown_seconds": 60})
    samples = [at(11, 400, "latency_ms"), at(6, 700, "latency_ms"), at(1, 600, "latency_ms")]
    [firing] = metrics_ingest(workspace=workspace, samples=samples).firings
    assert firing.trigger_id == trigger.pk
    assert Execution.objects.get(pk=firing.execution_id).trigger_payload["value"] == pytest.approx(1700 / 3)


def test_an_average_under_the_threshold_does_not_fire(workspace, make_trigger, clock):
    make_trigger(name="slow", trigger_type="threshold", config={"expression": "avg(latency_ms) > 500 for 10m"})
    metrics_ingest(workspace=workspace, samples=[at(11, 400, "latency_ms"), at(5, 900, "latency_ms"),
                                                 at(1, 100, "latency_ms")])
    assert not TriggerFiring.objects.exists()


def test_each_label_set_is_its_own_series(workspace, cpu_trigger, clock):
    metrics_ingest(workspace=workspace, samples=[at(6, 95, host="a"), at(6, 20, host="b"), at(0, 95, host="b")])
    assert not TriggerFiring.objects.exists()  # host b opened the window at 20; host a reported nothing since

    [firing] = metrics_ingest(workspace=workspace, samples=[at(0, 96, host="a")]).firings
    assert Execution.objects.get(pk=firing.execution_id).trigger_payload["labels"] == {"host": "a"}


def test_a_sustained_breach_fires_once_per_cooldown_and_records_one_cooldown_skip(workspace, cpu_trigger, clock):
    metrics_ingest(workspace=workspace, samples=[at(6, 95), at(0, 95)])
    assert len(started(cpu_trigger)) == 1

    for minute in range(1, 15):  # the breach goes on, one sample a minute
        clock.now = T0 + timedelta(minutes=minute)
        metrics_ingest(workspace=workspace, samples=[{"name": "cpu_percent", "value": 97}])
    assert len(started(cpu_trigger)) == 1
    [cooldown] = TriggerFiring.objects.filter(trigger=cpu_trigger, reason="cooldown")
    assert cooldown.fired_at == T0 + timedelta(minutes=1) and "quiet until" in cooldown.detail

    clock.now = T0 + timedelta(minutes=15, seconds=1)
    metrics_ingest(workspace=workspace, samples=[{"name": "cpu_percent", "value": 97}])
    assert len(started(cpu_trigger)) == 2
    assert Execution.objects.filter(trigger_id=cpu_trigger.pk).count() == 2


def test_a_disabled_threshold_trigger_is_not_judged(workspace, cpu_trigger, owner, clock):
    from triggers.services import trigger_update

    trigger_update(actor=owner, trigger=cpu_trigger, enabled=False)
    metrics_ingest(workspace=workspace, samples=[at(6, 95), at(0, 95)])
    assert not TriggerFiring.objects.exists()


def test_another_workspace_samples_do_not_feed_this_workspace_triggers(other_workspace, cpu_trigger, clock):
    metrics_ingest(workspace=other_workspace, samples=[at(6, 95), at(0, 95)])
    assert not TriggerFiring.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_ingests_of_a_breach_fire_once(workspace, cpu_trigger):
    now = datetime.now(UTC)
    metrics_ingest(workspace=workspace, samples=[{"name": "cpu_percent", "value": 95,
                                                  "timestamp": (now - timedelta(minutes=6)).isoformat()}])
    barrier = threading.Barrier(4)

    def ingest():
        try:
            barrier.wait()
            metrics_ingest(workspace=workspace, samples=[{"name": "cpu_percent", "value": 99}])
        finally:
            connection.close()

    with mock.patch("executions.tasks.run_segment.delay"), mock.patch("executions.tasks.post_process.delay"):
        threads = [threading.Thread(target=ingest) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert Execution.objects.filter(trigger_id=cpu_trigger.pk).count() == 1
    assert TriggerFiring.objects.filter(trigger=cpu_trigger, outcome="started").count() == 1
    assert TriggerFiring.objects.filter(trigger=cpu_trigger, reason="cooldown").count() <= 1
    assert MetricSample.objects.count() == 5


@override_settings(RIVER_METRIC_RETENTION_HOURS=2)
def test_samples_older_than_the_retention_are_pruned(workspace, clock):
    metrics_ingest(workspace=workspace, samples=[at(100, 1), at(30, 2), at(0, 3)])
    clock.now = T0 + timedelta(hours=1)
    assert tasks.metrics_prune() == 1  # 100 minutes + 1 hour > 2 hours
    assert sorted(MetricSample.objects.values_list("value", flat=True)) == [2.0, 3.0]


# ------------------------------------------------------------------ the endpoint


def post(client, body, **headers):
    return client.post("/api/v1/metrics/", body, format="json", **headers)


def test_a_member_who_may_run_agents_sends_samples(api_client_for, member, workspace, cpu_trigger, clock):
    response = post(api_client_for(member), {"workspace": workspace.pk, "samples": [at(6, 95), at(0, 95)]})
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["accepted"] == 2 and len(body["executions"]) == 1
    assert MetricSample.objects.filter(workspace=workspace).count() == 2


def test_a_viewer_may_not_send_samples(api_client_for, viewer, workspace, clock):
    response = post(api_client_for(viewer), {"workspace": workspace.pk, "samples": [at(0, 1)]})
    assert response.status_code == 403
    assert not MetricSample.objects.exists()


def test_an_outsider_gets_404_for_our_workspace(api_client_for, outsider, workspace, clock):
    response = post(api_client_for(outsider), {"workspace": workspace.pk, "samples": [at(0, 1)]})
    assert response.status_code == 404
    assert not MetricSample.objects.exists()


def test_nobody_unauthenticated_sends_samples(workspace, clock):
    from rest_framework.test import APIClient

    response = post(APIClient(), {"workspace": workspace.pk, "samples": [at(0, 1)]})
    assert response.status_code == 401 and "X-API-Key" in response["WWW-Authenticate"]
    bad_token = APIClient()
    bad_token.credentials(HTTP_AUTHORIZATION="Bearer rvr_not_a_token")
    assert post(bad_token, {"workspace": workspace.pk, "samples": [at(0, 1)]}).status_code == 401
    assert not MetricSample.objects.exists()


def test_an_api_key_of_the_workspace_sends_samples_and_another_orgs_key_is_refused(
        owner, outsider, workspace, other_workspace, clock):
    from rest_framework.test import APIClient

    from triggers.apikeys import api_key_issue, api_key_revoke

    ours = api_key_issue(created_by=owner, workspace=workspace, name="Prometheus")
    theirs = api_key_issue(created_by=outsider, workspace=other_workspace, name="Theirs").plaintext
    client = APIClient()
    body = {"workspace": workspace.pk, "samples": [at(0, 1)]}
    assert post(client, body, HTTP_X_API_KEY=ours.plaintext).status_code == 202
    assert post(client, body, HTTP_X_API_KEY=theirs).status_code == 403
    assert post(client, body | {"workspace": 999_999}, HTTP_X_API_KEY=ours.plaintext).status_code == 403
    assert post(client, body, HTTP_X_API_KEY="rtk_nope_nope").status_code == 401
    api_key_revoke(key=ours.key)
    assert post(client, body, HTTP_X_API_KEY=ours.plaintext).status_code == 401
    assert MetricSample.objects.count() == 1


@pytest.mark.parametrize(("samples", "field"), [
    ([at(0, 1), {"name": "cpu_percent", "value": "high"}], "samples.1.value"),
    ([{"name": "cpu_percent", "value": True}], "samples.0.value"),
    ([{"name": "cpu_percent", "value": 1e301}], "samples.0.value"),
    ([{"name": "9cpu", "value": 1}], "samples.0.name"),
    ([{"name": "", "value": 1}], "samples.0.name"),
    ([{"value": 1}], "samples.0.name"),
    ([{"name": "cpu", "value": 1, "timestamp": (T0 + timedelta(hours=1)).isoformat()}], "samples.0.timestamp"),
    ([{"name": "cpu", "value": 1, "timestamp": "2026-11-25T09:00:00"}], "samples.0.timestamp"),
    ([{"name": "cpu", "value": 1, "timestamp": "yesterday"}], "samples.0.timestamp"),
    ([{"name": "cpu", "value": 1, "timestamp": (T0 - timedelta(days=3)).timestamp()}], "samples.0.timestamp"),
    ([{"name": "cpu", "value": 1, "labels": {"host": 7}}], "samples.0.labels.host"),
    ([{"name": "cpu", "value": 1, "labels": ["host"]}], "samples.0.labels"),
    ([{"name": "cpu", "value": 1, "unit": "%"}], "samples.0.unit"),
    (["cpu=1"], "samples.0"),
    ([], "samples"),
    ([{"name": "cpu", "value": 1}] * (MAX_SAMPLES + 1), "samples"),
])
def test_a_bad_batch_is_a_400_naming_the_field_and_stores_nothing(api_client_for, member, workspace, clock,
                                                                  samples, field):
    response = post(api_client_for(member), {"workspace": workspace.pk, "samples": samples})
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not MetricSample.objects.exists()


def test_a_series_that_stopped_reporting_is_stale_not_breaching(workspace, cpu_trigger, clock):
    metrics_ingest(workspace=workspace, samples=[at(9, 95), at(6, 95), at(0, 50, host="other")])
    assert not TriggerFiring.objects.exists()


def test_an_infinite_value_in_the_raw_json_is_a_400(api_client_for, member, workspace, clock):
    body = '{"workspace": ' + str(workspace.pk) + ', "samples": [{"name": "cpu", "value": 1e999}]}'
    response = api_client_for(member).post("/api/v1/metrics/", body, content_type="application/json")
    assert response.status_code == 400
    assert not MetricSample.objects.exists()


def test_a_bad_workspace_field_is_a_400(api_client_for, member, clock):
    response = post(api_client_for(member), {"workspace": "ours", "samples": [at(0, 1)]})
    assert response.status_code == 400 and "workspace" in response.json()["error"]["details"]

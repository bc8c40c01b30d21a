"""/health/ready reports each model provider's state: the offline planner without a probe,
a configured OpenAI-compatible server probed with GET /models (never a model call), at
most once per RIVER_PROVIDER_PROBE_SECONDS; a provider down degrades, never fails, readiness."""

from __future__ import annotations

import socket

import pytest
from django.core.cache import cache
from django.test import Client

from executions.provider_health import SETTINGS_PROVIDER, provider_health_record

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()  # the probe's answer and the health window live in the cache
    yield
    cache.clear()


@pytest.fixture
def configured(settings):
    def configure(base_url: str | None) -> None:
        settings.RIVER_LLM_MODEL = "openai/fake-model"
        settings.RIVER_LLM_BASE_URL = base_url
        settings.RIVER_LLM_API_KEY = "sk-probe-key-0123456789"
        settings.RIVER_PROVIDER_PROBE_SECONDS = 30.0
        settings.RIVER_PROVIDER_PROBE_TIMEOUT_SECONDS = 2.0

    return configure


def ready() -> dict:
    response = Client().get("/health/ready")
    assert response.status_code == 200, response.content
    return response.json()


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens once the socket is closed


def test_without_a_model_the_offline_planner_is_ok_without_a_probe(settings):
    settings.RIVER_LLM_MODEL = None
    body = ready()
    assert body["providers"] == {"offline": {"state": "ok", "probe": "none"}}
    assert body["status"] == "ok"


def test_a_reachable_server_is_ok_probed_once_by_listing_models_never_by_a_completion(fake_openai, configured):
    server = fake_openai()
    configured(server.base_url)
    first = ready()["providers"]["default"]
    assert first["state"] == "ok"
    assert first["probe"]["reachable"] is True and first["probe"]["probe_status"] == 200
    again = ready()["providers"]["default"]
    assert again["probe"] == first["probe"]  # the cached answer
    assert server.model_list_requests == 1
    assert server.calls == 0  # no chat completion: nothing paid
    assert "sk-probe-key" not in str(ready())


def test_a_server_that_is_down_is_reported_unreachable_and_readiness_still_passes(configured):
    configured(closed_port_url())
    body = ready()
    assert body["status"] == "ok"
    assert body["checks"] == {"database": "ok", "broker": "ok", "channel_layer": "ok"}
    default = body["providers"]["default"]
    assert default["state"] == "unreachable"
    assert default["probe"]["reachable"] is False and default["probe"]["probe_error"]


def test_a_server_going_down_is_seen_once_the_cached_answer_expires(fake_openai, configured, settings):
    server = fake_openai()
    configured(server.base_url)
    assert ready()["providers"]["default"]["state"] == "ok"
    server.stop()
    assert ready()["providers"]["default"]["state"] == "ok"  # within RIVER_PROVIDER_PROBE_SECONDS
    cache.clear()  # the cached answer's time is up
    assert ready()["providers"]["default"]["state"] == "unreachable"


def test_a_server_that_answers_the_model_list_other_than_2xx_is_an_error(fake_openai, configured):
    server = fake_openai()
    configured(server.base_url.rsplit("/v1", 1)[0] + "/nowhere")  # answers GET /nowhere/models with a 404
    default = ready()["providers"]["default"]
    assert default["state"] == "error" and default["probe"]["probe_status"] == 404


def test_recent_failed_calls_make_the_provider_degraded(fake_openai, configured):
    server = fake_openai()
    configured(server.base_url)
    for ok in (False, False, False, True):
        provider_health_record(provider=SETTINGS_PROVIDER, latency_ms=120, ok=ok)
    default = ready()["providers"]["default"]
    assert default["state"] == "degraded"
    assert default["calls"] == 4 and default["error_rate"] == 0.75
    assert default["reasons"] == ["error rate 75% over 30%"]


def test_probing_off_reports_the_window_alone(fake_openai, configured, settings):
    server = fake_openai()
    configured(server.base_url)
    settings.RIVER_PROVIDER_PROBE_SECONDS = 0
    default = ready()["providers"]["default"]
    assert default == {"state": "ok", "calls": 0, "error_rate": 0.0, "probe": "none"}
    assert server.model_list_requests == 0

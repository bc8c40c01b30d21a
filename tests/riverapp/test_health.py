import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_health_answers_without_login():
    response = Client().get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_ready_reports_every_part_ok():
    response = Client().get("/health/ready")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"] == {"database": "ok", "broker": "ok", "channel_layer": "ok"}


def test_ready_is_503_and_names_the_channel_layer_when_it_fails(monkeypatch):
    class BrokenLayer:
        async def group_send(self, group, message):
            raise ConnectionError("channel layer unreachable")

    # The probe looks the layer up at call time; hand it a broken one.
    monkeypatch.setattr("channels.layers.get_channel_layer", lambda *args, **kwargs: BrokenLayer())
    response = Client().get("/health/ready")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["channel_layer"] == "channel_layer: ConnectionError"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"] == "ok"


def test_ready_is_503_and_names_the_broker_when_it_is_unreachable(monkeypatch, settings):
    from riverapp.celery import app

    if app.conf.broker_url.startswith("memory://"):
        pytest.skip("the in-memory broker cannot be unreachable")
    # Port 1 on localhost refuses connections: a real connection failure.
    monkeypatch.setitem(app.conf, "broker_write_url", "redis://127.0.0.1:1/0")
    response = Client().get("/health/ready")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("broker: ")
    assert response.json()["checks"]["channel_layer"] == "ok"

"""Redis down (cache and channel layer) never ends a run.

Redis is really unreachable here: the cache and the channel layer point at a port
on 127.0.0.1 where nothing listens, so every call is refused by the kernel. The
model is the fake OpenAI server, so the router's real code (which records and
reads provider health in the cache) runs.
"""

from __future__ import annotations

import socket

import pytest
from channels.layers import channel_layers

from executions import services, tasks
from executions.models import Execution, ExecutionEvent
from executions.provider_health import provider_health_get, provider_health_record
from telemetry.events import events_flush, events_publish_committed
from telemetry.faults import infra_fault_count
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed when the block ends: nothing listens there


@pytest.fixture
def redis_down(settings):
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url,
                                   "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}}
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "telemetry.layers.RiverChannelLayer",
                                           "CONFIG": {"hosts": [url], "prefix": "river-down"}}}
    channel_layers.backends.clear()
    yield url
    channel_layers.backends.clear()


@pytest.fixture
def sent(monkeypatch):
    calls: list[tuple[str, int]] = []
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda execution_id, _name=task.name: calls.append((_name, execution_id)))
    return calls


def test_provider_health_with_the_cache_down_drops_the_sample_and_reads_healthy(redis_down):
    before = infra_fault_count(component="cache")

    provider_health_record(provider="org-1:fake", latency_ms=120, ok=False)
    health = provider_health_get(providers=["org-1:fake"])

    assert health["org-1:fake"].degraded is False and health["org-1:fake"].calls == 0
    assert infra_fault_count(component="cache", operation="provider_health_record") >= 1
    assert infra_fault_count(component="cache") == before + 2


def test_events_to_a_channel_layer_that_is_down_are_dropped_and_counted_without_blocking(redis_down):
    before = infra_fault_count(component="channel_layer")

    events_publish_committed(workspace_id=1, execution_id=1, events=[{"type": "run_started", "execution_id": 1}])

    assert events_flush(timeout=10) is True
    assert infra_fault_count(component="channel_layer") == before + 1


def test_a_run_completes_with_the_cache_and_channel_layer_down_and_its_events_are_journaled(
    redis_down, workspace, owner, fake_openai, settings, sent
):
    server = fake_openai().text("The queue is empty.")
    settings.RIVER_LLM_MODEL = "openai/fake-model"
    settings.RIVER_LLM_BASE_URL = server.base_url
    settings.RIVER_LLM_API_KEY = "test-key"
    agent = make_agent(workspace=workspace, owner=owner)
    cache_before = infra_fault_count(component="cache")

    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Check the queue"))
    assert services.execution_run_segment(execution_id=execution.pk) == "success"

    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED
    assert execution.result["summary"] == "The queue is empty."
    kinds = list(ExecutionEvent.objects.filter(execution=execution).values_list("event_type", flat=True))
    assert kinds[0] == "run_started" and kinds[-1] == "run_completed"
    assert infra_fault_count(component="cache") > cache_before  # health was read and recorded, both refused
    assert server.calls == 1

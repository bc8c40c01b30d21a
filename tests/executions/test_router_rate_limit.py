"""A provider's rate_limit_rpm is enforced with a counter in PostgreSQL shared by
every process: a call over the limit is never sent; it goes to the next provider,
or waits for the next minute when that fits in the call's budget."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection

from executions.models import LLMProvider, ProviderCallWindow
from executions.providers import provider_call_acquire
from executions.routing import router_build, router_for_organization
from rivercore.llm import LLMError, LLMErrorKind
from rivercore.router import ProviderConfig, Router
from rivercore.types.agents import Tier

MESSAGES = [{"role": "user", "content": "How many tickets?"}]
MINUTE = 29_000_000 * 60  # a clock-minute boundary, in epoch seconds


class FakeClock:
    """Epoch seconds that move only when the router sleeps."""

    def __init__(self, now: float):
        self.now = now
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def provider(server, *, priority=1, rpm=None) -> ProviderConfig:
    return ProviderConfig(name=f"p-{uuid.uuid4().hex[:8]}", models={Tier.BALANCED: "openai/m"},
                          base_url=server.base_url, api_key="sk-test", priority=priority, max_retries=0,
                          rate_limit_rpm=rpm)


def ask(router: Router, timeout: float = 10.0):
    return router.complete(messages=MESSAGES, tools=[], tier=Tier.BALANCED, timeout_seconds=timeout)


@pytest.mark.django_db
def test_the_call_over_the_limit_goes_to_the_fallback_provider_unsent(fake_openai):
    limited, fallback = fake_openai(), fake_openai()
    limited.always("text", "from the limited provider")
    fallback.always("text", "from the fallback")
    clock = FakeClock(MINUTE + 5)
    router = router_build([provider(limited, priority=1, rpm=3), provider(fallback, priority=2)],
                    clock=clock, sleep=clock.sleep)

    replies = [ask(router).content for _ in range(4)]

    assert replies == ["from the limited provider"] * 3 + ["from the fallback"]
    assert (limited.calls, fallback.calls) == (3, 1)
    assert clock.pauses == []


@pytest.mark.django_db
def test_without_another_provider_the_call_waits_for_the_next_minute(fake_openai):
    server = fake_openai()
    server.always("text", "ok")
    clock = FakeClock(MINUTE + 45)
    router = router_build([provider(server, rpm=2)], clock=clock, sleep=clock.sleep)

    ask(router)
    ask(router)
    assert server.calls == 2
    ask(router, timeout=30)

    assert clock.pauses == [15]  # until MINUTE + 60, the next window
    assert server.calls == 3


@pytest.mark.django_db
def test_a_window_that_opens_after_the_budget_fails_the_call_without_sending(fake_openai):
    server = fake_openai()
    server.always("text", "ok")
    clock = FakeClock(MINUTE + 10)
    limited = provider(server, rpm=1)
    router = router_build([limited], clock=clock, sleep=clock.sleep)
    ask(router)

    with pytest.raises(LLMError) as caught:
        ask(router, timeout=20)  # the next window opens in 50 s

    assert caught.value.kind == LLMErrorKind.PROVIDER_UNAVAILABLE
    assert caught.value.details["attempts"] == [
        {"provider": limited.name, "model": "openai/m", "error": "rate_limited", "attempts": 0,
         "message": "at its limit of 1 requests a minute; not sent"}]
    assert server.calls == 1
    assert clock.pauses == []


@pytest.mark.django_db
def test_the_counter_keeps_one_row_per_provider():
    key = f"k-{uuid.uuid4().hex[:8]}"
    assert provider_call_acquire(provider_key=key, limit=2, window_start=MINUTE)
    assert provider_call_acquire(provider_key=key, limit=2, window_start=MINUTE)
    assert not provider_call_acquire(provider_key=key, limit=2, window_start=MINUTE)
    assert provider_call_acquire(provider_key=key, limit=2, window_start=MINUTE + 60)

    rows = list(ProviderCallWindow.objects.filter(provider_key=key).values_list("window_start", "calls"))
    assert rows == [(MINUTE + 60, 1)]


@pytest.mark.django_db(transaction=True)
def test_concurrent_workers_never_take_more_slots_than_the_limit():
    key = f"k-{uuid.uuid4().hex[:8]}"
    start = threading.Barrier(12)
    granted: list[bool] = []
    lock = threading.Lock()

    def worker():
        try:
            start.wait(timeout=10)
            ok = provider_call_acquire(provider_key=key, limit=5, window_start=MINUTE)
            with lock:
                granted.append(ok)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert len(granted) == 12
    assert granted.count(True) == 5
    assert ProviderCallWindow.objects.get(provider_key=key).calls == 5


@pytest.mark.django_db
def test_table_providers_carry_their_rate_limit_and_request_timeout(org, fake_openai):
    server = fake_openai()
    LLMProvider.objects.create(organization=org, provider_name="local", base_url=server.base_url,
                               tier_models={"balanced": "m"}, rate_limit_rpm=7, timeout_seconds=12)

    [config] = router_for_organization(organization_id=org.pk).providers

    assert (config.rate_limit_rpm, config.timeout_seconds) == (7, 12)

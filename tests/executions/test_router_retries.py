"""Timeouts and 5xx bursts are retried on the same provider with exponential
backoff and jitter, within the call's budget, before the router fails over; only
when every provider fails does the call fail. Real litellm HTTP against local fake
servers; the backoff sleep is injected, so nothing waits for it."""

from __future__ import annotations

import time
import uuid

import pytest

from executions.routing import router_build
from rivercore.llm import LLMError, LLMErrorKind
from rivercore.router import RETRY_BACKOFF_MAX_SECONDS, ProviderConfig, Router, retry_backoff
from rivercore.runner import Engine, new_state, response_build
from rivercore.types.agents import Tier
from tests.executions import engine_support as support

MESSAGES = [{"role": "system", "content": "You are a test agent."}, {"role": "user", "content": "How many?"}]


def provider(server, *, priority=1, max_retries=2, timeout=None) -> ProviderConfig:
    return ProviderConfig(name=f"p-{uuid.uuid4().hex[:8]}", models={Tier.BALANCED: "openai/river-test-model"},
                          base_url=server.base_url, api_key="sk-test", priority=priority, max_retries=max_retries,
                          timeout_seconds=timeout)


class Pauses(list):
    """The injected sleep: records each pause instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def router(*providers, pauses=None) -> Router:
    return router_build(list(providers), sleep=pauses if pauses is not None else Pauses(), rand=lambda: 1.0)


def ask(r: Router, timeout=10.0):
    return r.complete(messages=MESSAGES, tools=[], tier=Tier.BALANCED, timeout_seconds=timeout)


def test_backoff_doubles_is_capped_and_jittered_between_half_and_full():
    assert [retry_backoff(n, rand=lambda: 1.0) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]
    assert retry_backoff(30, rand=lambda: 1.0) == RETRY_BACKOFF_MAX_SECONDS
    assert retry_backoff(2, rand=lambda: 0.0) == 0.25  # half of 0.5


def test_a_burst_of_503s_is_retried_on_the_same_provider(fake_openai):
    server = fake_openai()
    server.error(503, "overloaded").error(503, "overloaded").text("answer after the burst")
    pauses = Pauses()

    reply = ask(router(provider(server, max_retries=2), pauses=pauses))

    assert reply.content == "answer after the burst"
    assert server.calls == 3
    assert pauses == [0.25, 0.5]  # exponential backoff (jitter pinned at its top)


def test_a_burst_of_timeouts_is_retried_on_the_same_provider(fake_openai):
    server = fake_openai()
    server.text("too late", delay=1.5).text("too late", delay=1.5).text("in time")
    pauses = Pauses()
    started = time.monotonic()

    reply = ask(router(provider(server, max_retries=2, timeout=0.3), pauses=pauses), timeout=10)

    assert reply.content == "in time"
    assert server.calls == 3
    assert pauses == [0.25, 0.5]
    assert time.monotonic() - started < 5  # each attempt gave up at the provider's 0.3 s


def test_a_persistent_5xx_fails_over_after_the_retries(fake_openai):
    broken, healthy = fake_openai(), fake_openai()
    broken.always("error", 502, "bad gateway")
    healthy.text("from the second provider")
    first, second = provider(broken, priority=1, max_retries=2), provider(healthy, priority=2)

    reply = ask(router(first, second))

    assert reply.content == "from the second provider"
    assert reply.provider == second.name
    assert (broken.calls, healthy.calls) == (3, 1)


def test_a_timeout_retry_that_does_not_fit_the_budget_fails_over_at_once(fake_openai):
    slow, fast = fake_openai(), fake_openai()
    slow.always("text", "too late", delay=2)
    fast.text("in time")
    pauses = Pauses()

    reply = ask(router(provider(slow, priority=1, max_retries=2, timeout=0.4), provider(fast, priority=2),
                       pauses=pauses), timeout=0.6)

    assert reply.content == "in time"
    assert slow.calls == 1  # 0.4 s spent; a pause plus another 0.4 s would pass the 0.6 s budget
    assert pauses == []


def test_every_provider_failing_fails_the_call_with_each_providers_attempts(fake_openai):
    a, b = fake_openai(), fake_openai()
    a.always("error", 503, "overloaded")
    b.always("error", 500, "exploded")

    with pytest.raises(LLMError) as caught:
        ask(router(provider(a, priority=1, max_retries=2), provider(b, priority=2, max_retries=1)))

    assert caught.value.kind == LLMErrorKind.PROVIDER_UNAVAILABLE
    assert [(x["error"], x["attempts"]) for x in caught.value.details["attempts"]] == [
        ("server_error", 3), ("server_error", 2)]
    assert (a.calls, b.calls) == (3, 2)


def test_a_run_survives_a_5xx_burst_in_one_turn(fake_openai):
    """Before: a 5xx burst failed the run after one turn; now the turn retries."""
    server = fake_openai()
    server.error(503).error(503).tool_call("test_echo", {"text": "a"}).text("Echoed a.")
    pauses = Pauses()
    r = router_build([ProviderConfig(name=f"p-{uuid.uuid4().hex[:8]}", models={Tier.BALANCED: "m"},
                               base_url=server.base_url, max_retries=2)], sleep=pauses)
    support.CALLS.clear()
    state, _ = new_state(support.request_for(tools=["test_echo"]))

    response = response_build(state, Engine(llm=r, sleep=pauses).run(state))

    assert response.status == "success"
    assert response.result.summary == "Echoed a."
    assert server.calls == 4
    assert len(pauses) == 2

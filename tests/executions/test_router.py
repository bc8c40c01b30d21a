"""The router over litellm's real HTTP path, against local fake OpenAI servers."""

from __future__ import annotations

import asyncio
import time
import uuid

import litellm
import pytest

from common.crypto import encrypt_text
from executions.models import LLMProvider
from executions.provider_health import (
    BUCKET_SECONDS,
    WINDOW_SECONDS,
    HealthBuffer,
    health_buffer,
    provider_health_get,
    provider_health_record,
    provider_health_snapshot,
)
from executions.routing import router_build, router_for_organization
from rivercore.llm import LLMError, LLMErrorKind
from rivercore.planner import rules as offline_rules
from rivercore.planner.provider import ensure_registered
from rivercore.router import ProviderConfig, Router, model_cost
from rivercore.types.agents import Tier
from rivercore.view import RunView

TOOLS = [{"type": "function", "function": {
    "name": "classify_intent", "description": "Classify.",
    "parameters": {"type": "object", "properties": {"user_prompt": {"type": "string"}}, "required": ["user_prompt"]},
}}]
MESSAGES = [{"role": "system", "content": "You are a test agent."}, {"role": "user", "content": "How many tickets?"}]


def provider(server, *, priority=1, models=None, max_retries=0, name=None) -> ProviderConfig:
    name = name or f"p-{uuid.uuid4().hex[:8]}"  # fresh health window per test
    return ProviderConfig(name=name, models=models or {Tier.BALANCED: "openai/river-test-model"},
                          base_url=server.base_url, api_key="sk-test", priority=priority, max_retries=max_retries)


def ask(router: Router, *, tier=Tier.BALANCED, timeout=10.0, tools=TOOLS):
    return router.complete(messages=MESSAGES, tools=tools, tier=tier, timeout_seconds=timeout)


def test_tool_call_reply_is_parsed(fake_openai):
    server = fake_openai()
    server.tool_call("classify_intent", {"user_prompt": "How many tickets?"}, call_id="call_abc")
    reply = ask(router_build([provider(server)]))

    assert reply.content is None
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_abc", "classify_intent", {"user_prompt": "How many tickets?"})]
    assert not reply.is_empty
    sent = server.requests[0]
    assert sent["model"] == "river-test-model"
    assert sent["messages"] == MESSAGES
    assert sent["tools"][0]["function"]["name"] == "classify_intent"
    assert server.headers[0]["authorization"] == "Bearer sk-test"


def test_invalid_tool_arguments_are_kept_raw(fake_openai):
    server = fake_openai()
    server.tool_call("classify_intent", '{"user_prompt": "unterminated')
    call = ask(router_build([provider(server)])).tool_calls[0]
    assert call.arguments == {}
    assert call.raw_arguments == '{"user_prompt": "unterminated'


def test_text_reply_and_token_usage(fake_openai):
    server = fake_openai()
    server.text("There are 3 tickets.", usage={"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127})
    reply = ask(router_build([provider(server)]), tools=[])
    assert reply.content == "There are 3 tickets."
    assert (reply.input_tokens, reply.output_tokens) == (120, 7)
    assert "tools" not in server.requests[0]  # an empty tool list is not sent


def test_empty_reply_is_flagged(fake_openai):
    server = fake_openai()
    server.empty()
    reply = ask(router_build([provider(server)]))
    assert reply.is_empty
    assert reply.tool_calls == []


def test_tier_picks_the_providers_model_with_fallbacks(fake_openai):
    server = fake_openai()
    server.always("text", "ok")
    router = router_build([provider(server, models={Tier.FAST: "openai/small", Tier.BALANCED: "openai/medium"})])
    assert ask(router, tier=Tier.FAST).model == "openai/small"
    coding = ask(router, tier=Tier.CODING)  # no coding model: balanced
    assert (coding.model, coding.tier) == ("openai/medium", Tier.BALANCED)
    only = router_build([provider(server, models={Tier.REASONING: "openai/deep"})])
    assert ask(only, tier=Tier.FAST).model == "openai/deep"  # no fast, no balanced: any tier it has
    assert [r["model"] for r in server.requests] == ["small", "medium", "deep"]


def test_failover_from_a_failing_provider_to_a_healthy_one(fake_openai):
    failing, healthy = fake_openai(), fake_openai()
    failing.always("error", 500, "upstream exploded")
    healthy.text("from the healthy provider")
    first = provider(failing, priority=1, max_retries=1)
    second = provider(healthy, priority=2)

    reply = ask(router_build([second, first]))

    assert reply.content == "from the healthy provider"
    assert reply.provider == second.name
    assert failing.calls == 2  # the 500 was retried once (max_retries=1), then the router failed over
    health_buffer.flush()  # the router's samples wait in this process's buffer until sent
    health = provider_health_get(providers=[first.window, second.window])
    assert (health[first.window].calls, health[first.window].errors) == (2, 2)
    assert (health[second.window].calls, health[second.window].errors) == (1, 0)


def test_timeout_fails_over_without_retrying_the_slow_provider(fake_openai):
    slow, fast = fake_openai(), fake_openai()
    slow.text("too late", delay=5)
    fast.text("in time")
    started = time.monotonic()
    reply = ask(router_build([provider(slow, priority=1, max_retries=2), provider(fast, priority=2)]), timeout=0.5)
    elapsed = time.monotonic() - started
    assert reply.content == "in time"
    assert slow.calls == 1
    assert elapsed < 4


def test_all_providers_failing_is_provider_unavailable(fake_openai):
    a, b = fake_openai(), fake_openai()
    a.always("error", 503, "overloaded")
    b.text("never", delay=5)
    with pytest.raises(LLMError) as caught:
        ask(router_build([provider(a, priority=1), provider(b, priority=2)]), timeout=0.5)
    assert caught.value.kind == LLMErrorKind.PROVIDER_UNAVAILABLE
    assert [attempt["error"] for attempt in caught.value.details["attempts"]] == ["server_error", "timeout"]


def test_a_bad_request_is_not_failed_over(fake_openai):
    a, b = fake_openai(), fake_openai()
    a.error(400, "messages: invalid")
    b.text("should not be asked")
    with pytest.raises(LLMError) as caught:
        ask(router_build([provider(a, priority=1), provider(b, priority=2)]))
    assert caught.value.kind == LLMErrorKind.BAD_RESPONSE
    assert b.calls == 0


def test_degraded_by_error_rate_is_tried_after_healthy_providers(fake_openai):
    preferred, backup = fake_openai(), fake_openai()
    preferred.always("text", "preferred")
    backup.always("text", "backup")
    first, second = provider(preferred, priority=1), provider(backup, priority=2)
    for index in range(10):
        provider_health_record(provider=first.window, latency_ms=800, ok=index >= 4)  # 40% errors
    assert provider_health_get(providers=[first.window])[first.window].degraded

    reply = ask(router_build([first, second]))
    assert reply.content == "backup"
    assert preferred.calls == 0


def test_error_rate_at_the_limit_is_not_degraded():
    name = f"p-{uuid.uuid4().hex[:8]}"
    for index in range(10):
        provider_health_record(provider=name, latency_ms=800, ok=index >= 3)  # exactly 30%
    health = provider_health_get(providers=[name])[name]
    assert health.error_rate == 0.3
    assert not health.degraded


def test_degraded_by_p90_latency(fake_openai):
    preferred, backup = fake_openai(), fake_openai()
    preferred.always("text", "preferred")
    backup.always("text", "backup")
    first, second = provider(preferred, priority=1), provider(backup, priority=2)
    for _ in range(8):
        provider_health_record(provider=first.window, latency_ms=1_200, ok=True)
    for _ in range(2):
        provider_health_record(provider=first.window, latency_ms=25_000, ok=True)
    health = provider_health_get(providers=[first.window])[first.window]
    assert health.error_rate == 0
    assert health.p50_ms <= 1_500 and health.p90_ms > 20_000
    assert health.degraded and "P90" in health.reasons[0]

    assert ask(router_build([first, second])).content == "backup"


def test_p90_at_twenty_seconds_is_not_degraded():
    name = f"p-{uuid.uuid4().hex[:8]}"
    for _ in range(10):
        provider_health_record(provider=name, latency_ms=19_900, ok=True)
    health = provider_health_get(providers=[name])[name]
    assert health.p90_ms == 20_000
    assert not health.degraded


def test_when_all_are_degraded_the_least_degraded_goes_first(fake_openai):
    worse, better = fake_openai(), fake_openai()
    worse.always("text", "worse")
    better.always("text", "better")
    first, second = provider(worse, priority=1), provider(better, priority=2)
    for index in range(10):
        provider_health_record(provider=first.window, latency_ms=500, ok=False)  # 100% errors
        provider_health_record(provider=second.window, latency_ms=500, ok=index >= 4)  # 40% errors
    assert ask(router_build([first, second])).content == "better"


def test_the_window_forgets_samples_older_than_five_minutes():
    name = f"p-{uuid.uuid4().hex[:8]}"
    now = time.time()
    for _ in range(5):
        provider_health_record(provider=name, latency_ms=30_000, ok=False, at=now - WINDOW_SECONDS - BUCKET_SECONDS)
    provider_health_record(provider=name, latency_ms=400, ok=True, at=now)
    health = provider_health_get(providers=[name], now=now)[name]
    assert (health.calls, health.errors, health.degraded) == (1, 0, False)


def test_snapshot_reports_percentiles_for_dashboards():
    name = f"p-{uuid.uuid4().hex[:8]}"
    for latency in [200] * 50 + [900] * 40 + [4_000] * 9 + [50_000]:
        provider_health_record(provider=name, latency_ms=latency, ok=True)
    [row] = provider_health_snapshot(providers=[name])
    assert row["calls"] == 100
    assert (row["p50_ms"], row["p90_ms"], row["p99_ms"]) == (250, 1_000, 4_000)
    assert row["degraded"] is False


def test_a_priced_model_is_costed_from_litellms_price_map(fake_openai):
    server = fake_openai(model="gpt-4o-mini")
    server.text("ok", usage={"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200})
    reply = ask(router_build([provider(server, models={Tier.BALANCED: "openai/gpt-4o-mini"})]), tools=[])
    prompt_cost, completion_cost = litellm.cost_per_token(model="gpt-4o-mini", prompt_tokens=1000,
                                                          completion_tokens=200)
    assert reply.cost_usd is not None and reply.cost_usd > 0
    assert reply.cost_usd == pytest.approx(prompt_cost + completion_cost)


def test_an_unknown_model_has_no_cost_rather_than_zero(fake_openai):
    server = fake_openai(model="gpt-4o-mini")  # the server's claim about itself is not what is priced
    server.text("ok", usage={"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200})
    reply = ask(router_build([provider(server, models={Tier.BALANCED: "openai/river-local-llama"})]), tools=[])
    assert reply.cost_usd is None
    assert (reply.input_tokens, reply.output_tokens) == (1000, 200)


def test_model_cost_of_the_offline_planner_is_zero():
    ensure_registered()
    assert model_cost(model=offline_rules.MODEL, input_tokens=500, output_tokens=50) == 0.0


def test_a_model_without_a_price_is_looked_up_once(monkeypatch):
    calls = []
    real = litellm.cost_per_token
    monkeypatch.setattr(litellm, "cost_per_token", lambda **kwargs: calls.append(kwargs) or real(**kwargs))
    model = "openai/river-test-unpriced-model"
    assert model_cost(model=model, input_tokens=10, output_tokens=5) is None
    looked_up = len(calls)
    assert model_cost(model=model, input_tokens=10, output_tokens=5) is None
    assert looked_up >= 1 and len(calls) == looked_up
    assert model_cost(model="gpt-4o-mini", input_tokens=1000, output_tokens=0) > 0  # priced ones still are


def test_organization_providers_come_from_the_table(org, other_org, fake_openai):
    server = fake_openai()
    server.always("text", "from the table")
    LLMProvider.objects.create(
        organization=org, provider_name="local", api_key_encrypted=encrypt_text("sk-secret-123"),
        base_url=server.base_url, tier_models={"fast": "small", "balanced": "medium"}, priority=2, max_retries=1,
    )
    LLMProvider.objects.create(organization=org, provider_name="disabled", enabled=False,
                               base_url=server.base_url, tier_models={"fast": "x"})
    LLMProvider.objects.create(organization=other_org, provider_name="theirs", base_url=server.base_url,
                               tier_models={"fast": "x"})

    router = router_for_organization(organization_id=org.pk)
    assert [p.name for p in router.providers] == ["local"]
    [config] = router.providers
    assert config.health_key == f"org{org.pk}:local"
    assert "sk-secret-123" not in repr(config)  # the key is a secret value

    reply = router.complete(messages=MESSAGES, tools=[], tier=Tier.FAST, timeout_seconds=10)
    assert (reply.content, reply.model, reply.provider) == ("from the table", "small", "local")
    assert server.requests[0]["model"] == "small"
    assert server.headers[0]["authorization"] == "Bearer sk-secret-123"


def test_settings_model_serves_every_tier_when_no_provider_is_configured(org, settings, fake_openai):
    server = fake_openai()
    server.always("text", "quick start")
    settings.RIVER_LLM_MODEL = "local-llama"
    settings.RIVER_LLM_BASE_URL = server.base_url
    settings.RIVER_LLM_API_KEY = None
    router = router_for_organization(organization_id=org.pk)
    [config] = router.providers
    assert set(config.models) == set(Tier)
    reply = router.complete(messages=MESSAGES, tools=[], tier=Tier.CODING, timeout_seconds=10)
    assert reply.content == "quick start"
    assert server.requests[0]["model"] == "local-llama"


def test_without_any_provider_the_offline_planner_answers(org, settings):
    settings.RIVER_LLM_MODEL = None
    router = router_for_organization(organization_id=org.pk)
    assert router.reads_view  # the offline planner reads the run's structured view, not the chat text
    view = {"run": RunView(prompt="How many tickets?").model_dump(mode="json")}
    reply = router.complete(messages=MESSAGES, tools=TOOLS, tier=Tier.FAST, timeout_seconds=10, view=view)
    assert (reply.model, reply.provider) == ("river-offline/planner", "river-offline")
    assert reply.tool_calls[0].name == "classify_intent"
    assert reply.cost_usd == 0.0
    assert reply.input_tokens > 0


@pytest.mark.django_db(transaction=True)
def test_the_async_entry_retries_and_fails_over_over_real_http_like_the_blocking_one(fake_openai):
    """acomplete (litellm's async client, used by hosted runs) and complete share one
    implementation: the same retry, failover and health records, over real HTTP."""
    failing, healthy = fake_openai(), fake_openai()
    failing.always("error", 500, "upstream exploded")
    healthy.text("from the healthy provider")
    first = provider(failing, priority=1, max_retries=1)
    second = provider(healthy, priority=2)
    router = router_build([second, first], sleep=lambda seconds: None)

    async def ask_async():
        return await router.acomplete(messages=MESSAGES, tools=TOOLS, tier=Tier.BALANCED, timeout_seconds=10)

    reply = asyncio.run(ask_async())

    assert reply.content == "from the healthy provider" and reply.provider == second.name
    assert failing.calls == 2
    health_buffer.flush()  # the router's samples wait in this process's buffer until sent
    health = provider_health_get(providers=[first.window, second.window])
    assert (health[first.window].calls, health[first.window].errors) == (2, 2)


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_router_buffers_health_samples_and_sends_them_in_one_batch(monkeypatch):
    """No cache round trip per model call: samples wait in memory until the flush interval
    has passed, then go out summed; reads are served from the window last read."""
    clock, sent = _Clock(), []
    buffer = HealthBuffer(flush_seconds=1.0, clock=clock)
    name = f"buffered-{uuid.uuid4().hex[:8]}"
    from executions import provider_health as module

    real_bump = module._bump
    monkeypatch.setattr(module, "_bump", lambda key, delta=1: (sent.append((key, delta)), real_bump(key, delta)))
    for index in range(5):
        buffer.record(name, 300, ok=index != 0)
    assert sent == []  # nothing left the process yet
    assert provider_health_get(providers=[name])[name].calls == 0
    clock.now += 1.0
    buffer.record(name, 300, ok=True)  # due: this call sends all six
    assert sorted(delta for key, delta in sent if key.endswith(":n")) == [6]
    health = provider_health_get(providers=[name])[name]
    assert (health.calls, health.errors) == (6, 1)
    # Reads: the first goes to the cache, the next within the interval does not.
    seen = buffer.get([name])
    provider_health_record(provider=name, latency_ms=300, ok=False)  # another process's sample
    assert buffer.get([name]) is seen
    clock.now += 1.0
    assert buffer.get([name])[name].errors == 2


def test_a_read_sends_this_processs_samples_first_and_a_fork_forgets_them():
    clock = _Clock()
    buffer = HealthBuffer(flush_seconds=5.0, clock=clock)
    name = f"own-{uuid.uuid4().hex[:8]}"
    buffer.record(name, 300, ok=False)
    clock.now += 5.0
    assert buffer.get([name])[name].errors == 1  # its own sample counts in what it reads
    buffer.record(name, 300, ok=False)
    buffer.forget()  # what os.register_at_fork runs in a child
    clock.now += 5.0
    buffer.flush()
    assert provider_health_get(providers=[name])[name].errors == 1


def test_with_no_interval_every_sample_is_sent_at_once():
    buffer = HealthBuffer(flush_seconds=0.0)
    name = f"eager-{uuid.uuid4().hex[:8]}"
    buffer.record(name, 300, ok=True)
    assert provider_health_get(providers=[name])[name].calls == 1


def test_openai_compatible_models_skip_the_openai_sdk(fake_openai):
    """River calls OpenAI-compatible servers through litellm's own HTTP handler, not the
    OpenAI SDK (whose per-call request transform doubled litellm's CPU per call)."""
    server = fake_openai().text("hello")

    reply = ask(router_build([provider(server)]))

    assert reply.content == "hello"
    sent = {name.lower() for name in server.headers[0]}
    assert not any(name.startswith("x-stainless") for name in sent), sorted(sent)
    assert server.requests[0]["tools"] == TOOLS and server.requests[0]["messages"] == MESSAGES

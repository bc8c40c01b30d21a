"""Per-provider health over a rolling five-minute window: latency P50/P90/P99 and
error rate, and whether the provider is degraded.

Where the window lives: Django's cache, which is Redis in production and locmem
in the embedded mode. Every web and Celery worker must see the same window (a
provider that times out for one worker times out for all), so process memory is
not enough. The window is kept as atomic counters rather than a list of samples:
per provider and per 15-second bucket, a call count, an error count and a
latency histogram. ``cache.incr`` is atomic in Redis (INCRBY) and in locmem (a
lock), so concurrent workers never lose each other's samples the way a
read-modify-write of a stored list would, and every key expires on its own, so
the window needs no cleanup and its size is fixed (buckets x counters).

The window is advisory, so every cache call here is best effort: with Redis down
a sample is dropped (counted and logged by ``telemetry.faults``) and every provider
reads as healthy, so the router falls back to plain priority order. A cache outage
never fails the model call it was measuring.

Percentiles come from the histogram, so they are reported as the upper edge of
the latency bin that holds them. The degraded rule's threshold (20 s) is a bin
edge, so "P90 over 20 s" is decided exactly.
"""

from __future__ import annotations

import math
import time

from django.core.cache import cache
from pydantic import BaseModel

from telemetry.faults import infra_fault_record

WINDOW_SECONDS = 300
BUCKET_SECONDS = 15
ERROR_RATE_LIMIT = 0.30
P90_LIMIT_MS = 20_000
# Upper edges (ms) of the latency bins; the last bin holds everything slower.
LATENCY_EDGES_MS = (
    100, 250, 500, 750, 1_000, 1_500, 2_000, 3_000, 4_000, 5_000, 7_500,
    10_000, 15_000, 20_000, 30_000, 45_000, 60_000, 120_000,
)
_BINS = len(LATENCY_EDGES_MS) + 1
_PREFIX = "river:llm-health"


class ProviderHealth(BaseModel):
    provider: str
    calls: int = 0
    errors: int = 0
    error_rate: float = 0.0
    p50_ms: int | None = None
    p90_ms: int | None = None
    p99_ms: int | None = None
    degraded: bool = False
    reasons: list[str] = []
    # How far past its limits the provider is (0 = healthy); orders degraded providers.
    degradation: float = 0.0


def _bin_for(latency_ms: float) -> int:
    for index, edge in enumerate(LATENCY_EDGES_MS):
        if latency_ms <= edge:
            return index
    return len(LATENCY_EDGES_MS)


def _key(provider: str, bucket: int, field: str) -> str:
    return f"{_PREFIX}:{provider}:{bucket}:{field}"


def _bump(key: str) -> None:
    try:
        cache.incr(key)
    except ValueError:  # first sample of this bucket
        if not cache.add(key, 1, timeout=WINDOW_SECONDS + 2 * BUCKET_SECONDS):
            cache.incr(key)


def provider_health_record(*, provider: str, latency_ms: float, ok: bool, at: float | None = None) -> None:
    """One call's outcome. ``provider`` is the health key (organization-scoped for
    table providers). ``at`` (epoch seconds) exists so tests can place samples."""
    bucket = int((time.time() if at is None else at) // BUCKET_SECONDS)
    try:
        _bump(_key(provider, bucket, "n"))
        if not ok:
            _bump(_key(provider, bucket, "err"))
        _bump(_key(provider, bucket, f"lat{_bin_for(latency_ms)}"))
    except Exception as exc:  # noqa: BLE001 - the health window is advisory; the call it measured stands
        infra_fault_record(component="cache", operation="provider_health_record", exc=exc)


def _percentile(histogram: list[int], total: int, fraction: float) -> int | None:
    if total == 0:
        return None
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= rank:
            return LATENCY_EDGES_MS[index] if index < len(LATENCY_EDGES_MS) else LATENCY_EDGES_MS[-1] + 1
    return None


def provider_health_get(*, providers: list[str], now: float | None = None) -> dict[str, ProviderHealth]:
    """Health of each provider over the last five minutes, one cache round trip."""
    current = int((time.time() if now is None else now) // BUCKET_SECONDS)
    buckets = range(current - WINDOW_SECONDS // BUCKET_SECONDS + 1, current + 1)
    fields = ["n", "err", *(f"lat{i}" for i in range(_BINS))]
    keys = [_key(p, b, f) for p in providers for b in buckets for f in fields]
    try:
        values = cache.get_many(keys) if keys else {}
    except Exception as exc:  # noqa: BLE001 - unknown health reads as healthy: plain priority order
        infra_fault_record(component="cache", operation="provider_health_get", exc=exc)
        values = {}
    result: dict[str, ProviderHealth] = {}
    for provider in providers:
        def total(field: str, provider=provider) -> int:
            return sum(int(values.get(_key(provider, b, field), 0)) for b in buckets)

        calls, errors = total("n"), total("err")
        histogram = [total(f"lat{i}") for i in range(_BINS)]
        samples = sum(histogram)
        health = ProviderHealth(provider=provider, calls=calls, errors=errors)
        if calls:
            health.error_rate = round(errors / calls, 4)
        health.p50_ms = _percentile(histogram, samples, 0.50)
        health.p90_ms = _percentile(histogram, samples, 0.90)
        health.p99_ms = _percentile(histogram, samples, 0.99)
        if health.error_rate > ERROR_RATE_LIMIT:
            health.reasons.append(f"error rate {health.error_rate:.0%} over {ERROR_RATE_LIMIT:.0%}")
        if health.p90_ms is not None and health.p90_ms > P90_LIMIT_MS:
            health.reasons.append(f"P90 latency over {P90_LIMIT_MS // 1000} s")
        health.degraded = bool(health.reasons)
        if health.degraded:
            health.degradation = round(
                max(health.error_rate / ERROR_RATE_LIMIT, (health.p90_ms or 0) / P90_LIMIT_MS), 4
            )
        result[provider] = health
    return result


def provider_health_snapshot(*, providers: list[str]) -> list[dict]:
    """For dashboards: one JSON-ready row per provider."""
    health = provider_health_get(providers=providers)
    return [health[p].model_dump() for p in providers]

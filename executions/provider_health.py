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

The router does not pay a cache round trip per model call: ``health_buffer``, one per
process, adds each call's sample to counters in memory and sends them to the cache at
most once per ``RIVER_PROVIDER_HEALTH_FLUSH_SECONDS`` (default 1 s; 0 sends at once), and
serves the window it last read for as long. Every process still sees every other
process's samples, at most that much later; a process flushes what it holds when it
exits, and a forked child starts with nothing of its parent's.

The window is advisory, so every cache call here is best effort: with Redis down
a sample is dropped (counted and logged by ``telemetry.faults``) and every provider
reads as healthy, so the router falls back to plain priority order. A cache outage
never fails the model call it was measuring.

Percentiles come from the histogram, so they are reported as the upper edge of
the latency bin that holds them. The degraded rule's threshold (20 s) is a bin
edge, so "P90 over 20 s" is decided exactly.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import time
from collections import Counter

from django.conf import settings
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


def _bump(key: str, delta: int = 1) -> None:
    try:
        cache.incr(key, delta)
    except ValueError:  # first sample of this bucket
        if not cache.add(key, delta, timeout=WINDOW_SECONDS + 2 * BUCKET_SECONDS):
            cache.incr(key, delta)


def _sample_keys(provider: str, latency_ms: float, ok: bool, at: float | None) -> list[str]:
    bucket = int((time.time() if at is None else at) // BUCKET_SECONDS)
    keys = [_key(provider, bucket, "n"), _key(provider, bucket, f"lat{_bin_for(latency_ms)}")]
    if not ok:
        keys.append(_key(provider, bucket, "err"))
    return keys


def _counts_send(counts: Counter) -> None:
    try:
        for key, delta in counts.items():
            _bump(key, delta)
    except Exception as exc:  # noqa: BLE001 - the health window is advisory; the call it measured stands
        infra_fault_record(component="cache", operation="provider_health_record", exc=exc)


def provider_health_record(*, provider: str, latency_ms: float, ok: bool, at: float | None = None) -> None:
    """One call's outcome, sent to the shared window now. ``provider`` is the health key
    (organization-scoped for table providers). ``at`` (epoch seconds) exists so tests
    can place samples. The router records through ``health_buffer`` instead."""
    _counts_send(Counter(_sample_keys(provider, latency_ms, ok, at)))


class HealthBuffer:
    """The process's view of the shared window: samples are counted in memory and sent
    in one batch at most every ``flush_seconds``; reads are served from the window as
    last read for as long. ``clock`` is injectable for tests."""

    def __init__(self, *, flush_seconds: float | None = None, clock=time.monotonic):
        self._flush_seconds = flush_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: Counter = Counter()
        self._sent_at = clock()
        self._read: dict[tuple[str, ...], tuple[float, dict[str, ProviderHealth]]] = {}

    @property
    def flush_seconds(self) -> float:
        if self._flush_seconds is not None:
            return self._flush_seconds
        return settings.RIVER_PROVIDER_HEALTH_FLUSH_SECONDS

    def record(self, provider: str, latency_ms: float, ok: bool) -> None:
        with self._lock:
            self._pending.update(_sample_keys(provider, latency_ms, ok, None))
            due = self._clock() - self._sent_at >= self.flush_seconds
        if due:
            self.flush()

    def flush(self) -> None:
        """Send what this process holds (also at exit)."""
        with self._lock:
            counts, self._pending = self._pending, Counter()
            self._sent_at = self._clock()
        if counts:
            _counts_send(counts)

    def get(self, providers: list[str]) -> dict[str, ProviderHealth]:
        key = tuple(providers)
        now = self._clock()
        read = self._read.get(key)
        if read is not None and now - read[0] < self.flush_seconds:
            return read[1]
        self.flush()  # this process's own samples count in what it reads
        health = provider_health_get(providers=providers)
        self._read[key] = (now, health)
        return health

    def forget(self) -> None:
        """Drop everything held (a forked child must not send its parent's samples)."""
        with self._lock:
            self._pending = Counter()
            self._read = {}
            self._sent_at = self._clock()


health_buffer = HealthBuffer()
atexit.register(health_buffer.flush)
os.register_at_fork(after_in_child=health_buffer.forget)


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


# --- readiness ---------------------------------------------------------------------------

PROBE_PREFIX = "river:provider-probe"
SETTINGS_PROVIDER = "settings:default"  # the health key of RIVER_LLM_MODEL's provider


def _probe(base_url: str, api_key: str | None) -> dict[str, object]:
    """``GET <base_url>/models``: listing models costs nothing on OpenAI-compatible
    servers, unlike a completion. Any answer shows the server is reachable; only a 2xx
    shows the key is accepted too."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{base_url.rstrip('/')}/models", headers=headers, follow_redirects=False,
                             timeout=settings.RIVER_PROVIDER_PROBE_TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        return {"reachable": False, "probe_error": exc.__class__.__name__}
    return {"reachable": True, "probe_status": response.status_code}


def _probe_cached(base_url: str, api_key: str | None) -> dict[str, object]:
    import hashlib

    key = f"{PROBE_PREFIX}:{hashlib.sha256(base_url.encode()).hexdigest()[:32]}"
    try:
        found = cache.get(key)
    except Exception as exc:  # noqa: BLE001 - readiness reports; a cache outage shows as a fresh probe
        infra_fault_record(component="cache", operation="provider_probe_get", exc=exc)
        found = None
    if found is not None:
        return found
    result = {**_probe(base_url, api_key), "probed_at": int(time.time())}
    try:
        cache.set(key, result, timeout=settings.RIVER_PROVIDER_PROBE_SECONDS)
    except Exception as exc:  # noqa: BLE001
        infra_fault_record(component="cache", operation="provider_probe_set", exc=exc)
    return result


def provider_readiness() -> dict[str, dict[str, object]]:
    """The deployment's own model provider as ``/health/ready`` reports it, by name.

    ``default`` (``RIVER_LLM_MODEL``): its state from the calls River made in the last
    five minutes (the shared window: ``degraded`` past its limits) and, when
    ``RIVER_LLM_BASE_URL`` is set, a reachability probe (``_probe``) made at most once per
    ``RIVER_PROVIDER_PROBE_SECONDS`` across all processes: ``unreachable`` when the server
    does not answer, ``error`` when it answers other than 2xx. Without a model the
    offline planner answers, in process: ``offline`` is ``ok`` with no probe.
    Organizations' own providers are not probed from here (their base URLs are tenants'
    input, and the endpoint is unauthenticated); their health is the router's window."""
    if not settings.RIVER_LLM_MODEL:
        return {"offline": {"state": "ok", "probe": "none"}}
    window = provider_health_get(providers=[SETTINGS_PROVIDER])[SETTINGS_PROVIDER]
    report: dict[str, object] = {"state": "ok", "calls": window.calls, "error_rate": window.error_rate}
    if window.degraded:
        report.update(state="degraded", reasons=list(window.reasons))
    base_url = settings.RIVER_LLM_BASE_URL
    if not base_url or settings.RIVER_PROVIDER_PROBE_SECONDS <= 0:
        report["probe"] = "none"
        return {"default": report}
    probe = _probe_cached(base_url, settings.RIVER_LLM_API_KEY)
    report["probe"] = probe
    if not probe.get("reachable"):
        report["state"] = "unreachable"
    elif not 200 <= int(probe.get("probe_status") or 0) < 300:
        report["state"] = "error"
    return {"default": report}

"""River's side of model routing: which providers a run may use, and the ports the
core's ``Router`` needs (the shared health window in Django's cache, the rate
counter in PostgreSQL)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from pydantic import SecretStr

from common.crypto import decrypt_text
from executions.models import LLMProvider
from executions.provider_health import ProviderHealth, health_buffer
from executions.providers import provider_call_acquire
from rivercore.router import ProviderConfig, Router, offline_provider
from rivercore.types.agents import Tier

logger = logging.getLogger("river.router")


class CacheHealthWindow:
    """``HealthWindow`` over ``executions.provider_health``: every process shares the
    window, and each reaches it through its ``health_buffer`` (no cache round trip per
    model call)."""

    def get(self, providers: list[str]) -> Mapping[str, ProviderHealth]:
        return health_buffer.get(providers)

    def record(self, provider: str, latency_ms: float, ok: bool) -> None:
        health_buffer.record(provider, latency_ms, ok)


def db_rate_acquire(key: str, limit: int, window_start: int) -> bool:
    """``RateAcquire`` over the PostgreSQL per-minute counter."""
    return provider_call_acquire(provider_key=key, limit=limit, window_start=window_start)


def router_build(providers: list[ProviderConfig], **options: Any) -> Router:
    """A ``Router`` over ``providers`` with River's shared health window and rate counter
    (``options``: the router's injectable clock, sleep and jitter)."""
    return Router(providers, health=CacheHealthWindow(), rate_acquire=db_rate_acquire, **options)


def providers_for_organization(*, organization_id: int, has_providers: bool = True) -> list[ProviderConfig]:
    """The organization's enabled providers, else the settings' quick-start model,
    else the offline planner. ``has_providers=False`` (the caller knows there are none)
    skips the read."""
    rows = (LLMProvider.objects.filter(organization_id=organization_id, enabled=True).order_by("priority", "id")
            if has_providers else [])
    providers = []
    for row in rows:
        tiers = {t.value for t in Tier}
        models = {Tier(tier): name for tier, name in (row.tier_models or {}).items() if tier in tiers and name}
        if not models:
            logger.warning("provider %s of organization %s has no tier models; skipped", row.provider_name,
                           organization_id)
            continue
        key = decrypt_text(row.api_key_encrypted) if row.api_key_encrypted else None
        providers.append(ProviderConfig(
            name=row.provider_name, models=models, api_key=SecretStr(key) if key else None,
            base_url=row.base_url or None, priority=row.priority, max_retries=row.max_retries,
            timeout_seconds=row.timeout_seconds or None, rate_limit_rpm=row.rate_limit_rpm or None,
            health_key=f"org{organization_id}:{row.provider_name}",
        ))
    if providers:
        return providers
    if settings.RIVER_LLM_MODEL:
        key = settings.RIVER_LLM_API_KEY
        return [ProviderConfig(
            name="default", models={tier: settings.RIVER_LLM_MODEL for tier in Tier},
            api_key=SecretStr(key) if key else None, base_url=settings.RIVER_LLM_BASE_URL,
            health_key="settings:default",
        )]
    return [offline_provider()]


def router_for_organization(*, organization_id: int, has_providers: bool = True) -> Router:
    return router_build(providers_for_organization(organization_id=organization_id, has_providers=has_providers))

"""Liveness and readiness probes."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.db import connection
from django.http import JsonResponse

from common.edge import read_only_endpoint


@read_only_endpoint
def health(request):
    return JsonResponse({"status": "ok"})


def _check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return f"database: {exc.__class__.__name__}"
    return None


def _check_broker() -> str | None:
    from riverapp.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:  # noqa: BLE001
        return f"broker: {exc.__class__.__name__}"
    return None


def _check_channel_layer() -> str | None:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return "channel_layer: not configured"
    try:
        async_to_sync(layer.group_send)("health-probe", {"type": "health.probe"})
    except Exception as exc:  # noqa: BLE001
        return f"channel_layer: {exc.__class__.__name__}"
    return None


def _providers() -> dict:
    """Each model provider's state (executions.provider_health.provider_readiness). Never
    fails readiness: a run whose provider is down fails or falls back on its own, and the
    rest of River (approvals, triggers, pages) still serves; the state is reported so a
    dashboard or an operator sees it."""
    from executions.provider_health import provider_readiness

    try:
        return provider_readiness()
    except Exception as exc:  # noqa: BLE001 - a report, never a reason to fail the probe
        return {"error": {"state": "unknown", "problem": exc.__class__.__name__}}


@read_only_endpoint
def ready(request):
    checks = {"database": _check_database(), "broker": _check_broker(), "channel_layer": _check_channel_layer()}
    failing = {name: problem for name, problem in checks.items() if problem}
    body = {
        "status": "ok" if not failing else "unavailable",
        "checks": {name: ("ok" if not problem else problem) for name, problem in checks.items()},
        "providers": _providers(),
    }
    return JsonResponse(body, status=200 if not failing else 503)

"""``GET /metrics``: Prometheus text exposition of every process's samples.

Open only to ``Authorization: Bearer <RIVER_METRICS_TOKEN>`` (compared in constant time)
or to a client address inside ``RIVER_METRICS_ALLOWED_IPS``. A user's session or API
token does not open it. With neither setting configured the endpoint does not exist (404).
The client address is ``REMOTE_ADDR`` (the peer River sees), never a forwarded header."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from telemetry.metrics import GaugeAtScrape, metrics_render


def _bearer_ok(request) -> bool | None:
    """True/False when a bearer token was sent, None when none was."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    expected = settings.RIVER_METRICS_TOKEN
    return bool(expected) and hmac.compare_digest(token.strip().encode(), expected.encode())


def _address_ok(request) -> bool:
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in settings.RIVER_METRICS_ALLOWED_IPS
               if network.version == address.version)


def _approvals_pending() -> int:
    from governance.models import ApprovalRequest

    return ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING).count()


@require_GET
def metrics(request):
    if not settings.RIVER_METRICS_TOKEN and not settings.RIVER_METRICS_ALLOWED_IPS:
        raise Http404
    bearer = _bearer_ok(request)
    if not (bearer or (bearer is None and _address_ok(request))):
        response = HttpResponse("Metrics need a bearer token or an allowed client address.\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="river-metrics"'
        return response
    body = metrics_render(GaugeAtScrape("river_approvals_pending", "Approval requests waiting for a decision.",
                                        _approvals_pending))
    response = HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response

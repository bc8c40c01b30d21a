"""Webhook endpoints and event delivery: ``POST /api/v1/hooks/{endpoint id}``.

Signature: ``X-River-Signature: t=<unix seconds>,v1=<hex>`` where the hex is
HMAC-SHA256 of ``"<t>.<raw body>"`` keyed with the endpoint's secret. Several ``v1=``
entries may be sent (one per secret during a rotation); one valid entry suffices.
Nothing about a delivery is stored until its signature, timestamp and body have passed:
a refused delivery writes no row (it is logged and counted in the cache).

A verified event is matched against every enabled event trigger of the endpoint's
workspace that names this endpoint's slug and the event's type; each trigger's
condition filters on ``payload``; each match fires on its own (one failing never
stops the others). The event id is each firing's dedupe key, so a redelivery starts
nothing again.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.exceptions import ParseError

from common.crypto import decrypt_text, encrypt_text
from common.parsers import JSONParser
from governance.expressions import ExpressionError, matches
from rivercore.errors import InvalidInput, RiverError
from telemetry.metrics import webhook_refusal_record
from tenancy.models import Workspace
from triggers.models import TriggerFiring, WebhookEndpoint
from triggers.selectors import triggers_enabled_of_type
from triggers.services import trigger_fire, trigger_firing_skip
from triggers.types import SLUG, EventConfig, TriggerType

logger = logging.getLogger("river.triggers")

SECRET_PREFIX = "whsec"  # noqa: S105 - a public marker, not a secret
TOLERANCE_SECONDS = 300
BODY_MAX_BYTES = 262_144
EVENT_ID_MAX = 200
DEFAULT_ROTATION_GRACE = timedelta(hours=24)
MAX_ROTATION_GRACE = timedelta(days=7)
_SIGNATURE_PART = re.compile(r"\s*(t|v1)=([0-9A-Za-z]+)\s*\Z")


class SignatureRefused(RiverError):
    status_code = 401
    code = "signature_invalid"


class BodyTooLarge(RiverError):
    status_code = 413
    code = "request_too_large"


@dataclass(frozen=True)
class IssuedSecret:
    endpoint: WebhookEndpoint
    secret: str  # shown once


# --- managing endpoints ------------------------------------------------------------------------


def _new_secret() -> str:
    return f"{SECRET_PREFIX}_{secrets.token_urlsafe(32)}"


def webhook_endpoint_create(*, workspace: Workspace, slug: str, created_by) -> IssuedSecret:
    if not isinstance(slug, str) or not SLUG.match(slug):
        raise InvalidInput("Invalid slug.", details={"slug": [
            "Lowercase letters, digits and hyphens, up to 80 (for example 'zendesk')."]})
    secret = _new_secret()
    try:
        with transaction.atomic():
            endpoint = WebhookEndpoint.objects.create(workspace=workspace, slug=slug,
                                                      secret_encrypted=encrypt_text(secret), created_by=created_by)
    except IntegrityError:
        raise InvalidInput("Slug taken.",
                           details={"slug": ["This workspace has an endpoint with this slug."]}) from None
    return IssuedSecret(endpoint=endpoint, secret=secret)


def webhook_endpoint_rotate(*, endpoint: WebhookEndpoint, previous_valid_for: timedelta = DEFAULT_ROTATION_GRACE,
                            ) -> IssuedSecret:
    """A new current secret; the one it replaces stays valid for ``previous_valid_for``
    (zero ends it now). A secret older than that, from an earlier rotation, ends now."""
    if not timedelta(0) <= previous_valid_for <= MAX_ROTATION_GRACE:
        raise InvalidInput("Grace period out of range.", details={"previous_valid_seconds": [
            f"Between 0 and {int(MAX_ROTATION_GRACE.total_seconds())} seconds."]})
    secret = _new_secret()
    now = timezone.now()
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        endpoint.previous_secret_encrypted = endpoint.secret_encrypted if previous_valid_for else ""
        endpoint.previous_secret_expires_at = now + previous_valid_for if previous_valid_for else None
        endpoint.secret_encrypted = encrypt_text(secret)
        endpoint.rotated_at = now
        endpoint.save(update_fields=["previous_secret_encrypted", "previous_secret_expires_at", "secret_encrypted",
                                     "rotated_at"])
    return IssuedSecret(endpoint=endpoint, secret=secret)


def webhook_endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    endpoint.delete()


# --- verifying a delivery ----------------------------------------------------------------------


def signature_compute(*, secret: str, timestamp: int | str, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``"<timestamp>.<body>"`` (what a sender puts after ``v1=``)."""
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def _active_secrets(endpoint: WebhookEndpoint, now: datetime) -> list[str]:
    active = [decrypt_text(endpoint.secret_encrypted)]
    if endpoint.previous_secret_encrypted and endpoint.previous_secret_expires_at and \
            endpoint.previous_secret_expires_at > now:
        active.append(decrypt_text(endpoint.previous_secret_encrypted))
    return active


# The metric's reason label for each refusal reason (a fixed set, never the text itself).
_REFUSAL_LABELS = (("no X-River-Signature", "missing"), ("malformed", "malformed"), ("X-River-Signature", "malformed"),
                   ("timestamp", "stale_timestamp"), ("no signature", "bad_signature"))


def _refusal_label(reason: str) -> str:
    return next((label for prefix, label in _REFUSAL_LABELS if reason.startswith(prefix)), "other")


def _refuse(endpoint: WebhookEndpoint, reason: str) -> SignatureRefused:
    """Count and log a refused delivery (never the secret or the signature)."""
    counter = f"river:webhook-refused:{endpoint.pk}"
    try:
        cache.add(counter, 0, timeout=None)
        cache.incr(counter)
    except Exception:  # noqa: BLE001 - a counter never decides a delivery
        logger.debug("webhook refusal counter unavailable", exc_info=True)
    logger.warning("webhook delivery to endpoint %s refused: %s", endpoint.pk, reason)
    webhook_refusal_record(reason=_refusal_label(reason))
    return SignatureRefused(f"Webhook signature refused: {reason}.")


def webhook_refusals(*, endpoint: WebhookEndpoint) -> int:
    """How many deliveries to the endpoint were refused (since the cache was last cleared)."""
    return int(cache.get(f"river:webhook-refused:{endpoint.pk}") or 0)


def webhook_verify(*, endpoint: WebhookEndpoint, signature_header: str | None, body: bytes,
                   now: datetime | None = None) -> None:
    """Raise SignatureRefused unless the header carries a fresh timestamp and a v1
    signature of this body made with one of the endpoint's active secrets."""
    now = now or timezone.now()
    if not signature_header:
        raise _refuse(endpoint, "no X-River-Signature header")
    if len(signature_header) > 1000:
        raise _refuse(endpoint, "malformed X-River-Signature header")
    timestamp, candidates = None, []
    for part in signature_header.split(","):
        match = _SIGNATURE_PART.match(part)
        if not match:
            raise _refuse(endpoint, "malformed X-River-Signature header")
        if match.group(1) == "t":
            timestamp = match.group(2)
        else:
            candidates.append(match.group(2).lower())
    if timestamp is None or not timestamp.isdigit() or len(timestamp) > 12 or not candidates:
        raise _refuse(endpoint, "X-River-Signature needs t=<unix seconds> and v1=<hex>")
    if abs(now.timestamp() - int(timestamp)) > TOLERANCE_SECONDS:
        raise _refuse(endpoint, f"timestamp more than {TOLERANCE_SECONDS} seconds from now")
    for secret in _active_secrets(endpoint, now):
        expected = signature_compute(secret=secret, timestamp=timestamp, body=body)
        # Every candidate is compared against every secret: the time taken does not say which failed.
        if any(hmac.compare_digest(expected.encode(), candidate.encode()) for candidate in candidates):
            return
    raise _refuse(endpoint, "no signature matches")


# --- delivering an event -----------------------------------------------------------------------


def json_strict_parse(raw: bytes) -> object:
    """JSON as the API's own parser reads it (common.parsers.JSONParser): no NaN or
    Infinity, no NUL, no nesting past RIVER_JSON_MAX_DEPTH; a 400 naming ``body`` else."""
    try:
        return JSONParser().parse(io.BytesIO(raw), parser_context={"encoding": "utf-8"})
    except ParseError:
        raise InvalidInput("The body is not JSON.", details={"body": ["A JSON object is required."]}) from None


@dataclass(frozen=True)
class Event:
    event_type: str
    event_id: str | None
    payload: dict


def webhook_event_parse(*, body: bytes, type_header: str | None, id_header: str | None) -> Event:
    """The event in a verified body: a JSON object, its type (header, else ``type``) and
    id (header, else ``id``). Anything else is a 400 naming what is wrong."""
    payload = json_strict_parse(body)
    if not isinstance(payload, dict):
        raise InvalidInput("The body must be a JSON object.", details={"body": ["A JSON object is required."]})
    event_type = type_header if type_header else payload.get("type")
    if not isinstance(event_type, str) or not event_type.strip():
        raise InvalidInput("No event type.", details={"type": [
            "Send X-River-Event-Type or a 'type' field in the body."]})
    event_type = event_type.strip()
    if len(event_type) > 100:
        raise InvalidInput("Event type too long.", details={"type": ["At most 100 characters."]})
    event_id = id_header if id_header else payload.get("id")
    if isinstance(event_id, bool) or (event_id is not None and not isinstance(event_id, str | int)):
        raise InvalidInput("Invalid event id.", details={"id": ["A string or a whole number."]})
    event_id = str(event_id).strip() if event_id is not None else None
    if event_id is not None and not (0 < len(event_id) <= EVENT_ID_MAX):
        raise InvalidInput("Invalid event id.", details={"id": [f"1 to {EVENT_ID_MAX} characters."]})
    return Event(event_type=event_type, event_id=event_id, payload=payload)


def webhook_receive(*, endpoint: WebhookEndpoint, body: bytes, signature_header: str | None,
                    type_header: str | None = None, id_header: str | None = None,
                    now: datetime | None = None) -> list[TriggerFiring]:
    """Verify, parse, then fire every matching event trigger. Returns their firings."""
    if len(body) > BODY_MAX_BYTES:
        raise BodyTooLarge(f"The body is larger than {BODY_MAX_BYTES} bytes.",
                           details={"body": [f"At most {BODY_MAX_BYTES} bytes."]})
    now = now or timezone.now()
    webhook_verify(endpoint=endpoint, signature_header=signature_header, body=body, now=now)
    event = webhook_event_parse(body=body, type_header=type_header, id_header=id_header)
    source = f"webhook:{endpoint.slug}"
    # Matched in Python: a workspace holds few event triggers, and the config column's
    # typed field validates whole configs, not the values of key lookups.
    candidates = [trigger for trigger in triggers_enabled_of_type(workspace_id=endpoint.workspace_id,
                                                                  trigger_type=TriggerType.EVENT)
                  if trigger.config.get("endpoint") == endpoint.slug
                  and trigger.config.get("event_type") == event.event_type]
    firings = []
    for trigger in candidates:
        try:
            firings.append(_deliver(trigger=trigger, event=event, source=source, now=now))
        except Exception:  # noqa: BLE001 - one trigger's fault never blocks the others
            logger.exception("event %s for trigger %s failed", event.event_id, trigger.pk)
    return firings


def _deliver(*, trigger, event: Event, source: str, now: datetime) -> TriggerFiring:
    config = EventConfig.model_validate(trigger.config)
    if config.condition:
        try:
            matched = matches(config.condition, {"payload": event.payload})
        except ExpressionError as exc:
            matched, why = False, f"condition could not be evaluated: {exc.reason}"
        else:
            why = f"condition {config.condition!r} is false"
        if not matched:
            return trigger_firing_skip(trigger=trigger, source=source, reason=TriggerFiring.Reason.FILTERED,
                                       detail=why, payload=event.payload, dedupe_key=event.event_id, fired_at=now)
    return trigger_fire(trigger=trigger, payload=event.payload, source=source, dedupe_key=event.event_id,
                        triggered_at=now)

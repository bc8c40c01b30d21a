"""Webhook endpoints and event delivery: ``POST /api/v1/hooks/{endpoint id}``.

Each endpoint has a ``scheme`` (triggers.models.WebhookScheme) that says how its
deliveries are signed; every scheme is verified in constant time against each active
secret (the current one, and the previous one during a rotation's grace) and bounds
replay its own way:

- ``standard`` (Standard Webhooks, the default): ``webhook-id``, ``webhook-timestamp``
  and ``webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``,
  keyed with the base64-decoded part of the ``whsec_`` secret. The id, the timestamp
  and the body are all signed; the event type is the body's ``type`` and the payload
  its ``data``; the ``webhook-id`` is the dedupe key. 300 s timestamp tolerance.
- ``stripe``: ``Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">``
  keyed with the whole ``whsec_`` secret; the type and id are the signed body's
  ``type`` and ``id``; the payload is the whole event. 300 s tolerance (Stripe's own).
- ``github``: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``. GitHub
  signs neither its headers nor a timestamp, so a verified body is recorded by digest
  (WebhookDelivery) with the ``X-GitHub-Delivery`` id and ``X-GitHub-Event`` type it
  came with; the same body with another id or type is refused for
  ``GITHUB_DELIVERY_WINDOW``. The payload is the whole body.
- ``river_legacy``: ``X-River-Signature: t=<unix seconds>,v1=<hex>`` over
  ``"<t>.<body>"``; the id and type come from unsigned headers when sent, so it is
  kept only for endpoints made before the schemes and no endpoint can choose it.

Nothing about a delivery is stored until its signature, timestamp and body have passed:
a refused delivery writes no row (it is logged and counted in the cache).

A verified event is matched against every enabled event trigger of the endpoint's
workspace that names this endpoint's slug and the event's type; each trigger's
condition filters on ``payload``; each match fires on its own (one failing never
stops the others). The event id is each firing's dedupe key, so a redelivery starts
nothing again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import io
import logging
import re
import secrets
from collections.abc import Callable, Mapping
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
from triggers.models import TriggerFiring, WebhookDelivery, WebhookEndpoint, WebhookScheme
from triggers.selectors import triggers_enabled_of_type
from triggers.services import trigger_fire, trigger_firing_skip
from triggers.types import SLUG, EventConfig, TriggerType

logger = logging.getLogger("river.triggers")

SECRET_PREFIX = "whsec"  # noqa: S105 - a public marker, not a secret
SECRET_BYTES = 24  # Standard Webhooks allows 24 to 64; 24 bytes make 32 base64 characters, no padding
TOLERANCE_SECONDS = 300
BODY_MAX_BYTES = 262_144
EVENT_ID_MAX = 200
EVENT_TYPE_MAX = 100
HEADER_MAX = 4096
DEFAULT_ROTATION_GRACE = timedelta(hours=24)
MAX_ROTATION_GRACE = timedelta(days=7)
GITHUB_DELIVERY_WINDOW = timedelta(days=30)  # GitHub redelivers up to 3 days back (7 on Enterprise Server)
# Schemes an endpoint may be created with or changed to; river_legacy only survives on old endpoints.
CHOOSABLE_SCHEMES = (WebhookScheme.STANDARD, WebhookScheme.GITHUB, WebhookScheme.STRIPE)
# Schemes whose secret the sender (GitHub, Stripe) issued: the admin supplies it.
SUPPLIED_SECRET_SCHEMES = (WebhookScheme.GITHUB, WebhookScheme.STRIPE)
_SIGNATURE_PART = re.compile(r"\s*(t|v1)=([0-9A-Za-z]+)\s*\Z")
_STRIPE_PART = re.compile(r"\s*([a-z0-9]+)=([0-9A-Za-z]*)\s*\Z")
_STRIPE_SECRET = re.compile(r"whsec_[A-Za-z0-9]{16,200}\Z")
_GITHUB_SIGNATURE = re.compile(r"\s*sha256=([0-9a-fA-F]{64})\s*\Z")
_GITHUB_EVENT = re.compile(r"[a-z][a-z0-9_]{0,99}\Z")
_TIMESTAMP = re.compile(r"[0-9]{1,12}\Z")
# A delivery id: printable ASCII without spaces (it is part of a signed string and a dedupe key).
_DELIVERY_ID = re.compile(rf"[\x21-\x7e]{{1,{EVENT_ID_MAX}}}\Z")


class SignatureRefused(RiverError):
    status_code = 401
    code = "signature_invalid"


class BodyTooLarge(RiverError):
    status_code = 413
    code = "request_too_large"


@dataclass(frozen=True)
class IssuedSecret:
    endpoint: WebhookEndpoint
    secret: str | None  # shown once; None when the admin supplied it (GitHub, Stripe)


# --- managing endpoints ------------------------------------------------------------------------


def _new_secret() -> str:
    """``whsec_`` and the standard base64 of random bytes: the Standard Webhooks format,
    whose HMAC key is the decoded bytes (river_legacy endpoints key with the whole text)."""
    return f"{SECRET_PREFIX}_{base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()}"


def _scheme_choosable(scheme: object) -> WebhookScheme:
    if scheme not in CHOOSABLE_SCHEMES:
        if scheme == WebhookScheme.RIVER_LEGACY:
            why = "river_legacy leaves the event id and type unsigned; only endpoints made before it keep it."
        else:
            why = f"One of {', '.join(CHOOSABLE_SCHEMES)}."
        raise InvalidInput("Invalid scheme.", details={"scheme": [why]})
    return WebhookScheme(scheme)


def _secret_for(*, scheme: str, secret: str | None) -> tuple[str, str | None]:
    """(the secret to store, the secret to show once): River makes one for its own
    schemes; GitHub's and Stripe's are the sender's, supplied here and never shown."""
    if scheme not in SUPPLIED_SECRET_SCHEMES:
        if secret is not None:
            raise InvalidInput("River makes this endpoint's secret.", details={"secret": [
                f"Leave it out: River generates the secret of a {scheme} endpoint and shows it once."]})
        made = _new_secret()
        return made, made
    if not isinstance(secret, str) or not secret:
        raise InvalidInput("Secret required.", details={"secret": [
            f"Paste the signing secret {WebhookScheme(scheme).label} shows for this webhook."]})
    if scheme == WebhookScheme.STRIPE and not _STRIPE_SECRET.match(secret):
        raise InvalidInput("Invalid secret.", details={"secret": [
            "A Stripe signing secret: whsec_ followed by letters and digits (from the Stripe dashboard or CLI)."]})
    if scheme == WebhookScheme.GITHUB and not (16 <= len(secret) <= 256 and secret.isprintable()
                                               and secret == secret.strip()):
        raise InvalidInput("Invalid secret.", details={"secret": [
            "16 to 256 printable characters, no spaces at either end (set the same text in GitHub)."]})
    return secret, None


def webhook_endpoint_create(*, workspace: Workspace, slug: str, created_by,
                            scheme: str = WebhookScheme.STANDARD, secret: str | None = None) -> IssuedSecret:
    """A new endpoint. ``secret``: for ``github`` and ``stripe`` the sender's secret
    (required); for ``standard`` River makes one (and refuses one given)."""
    if not isinstance(slug, str) or not SLUG.match(slug):
        raise InvalidInput("Invalid slug.", details={"slug": [
            "Lowercase letters, digits and hyphens, up to 80 (for example 'zendesk')."]})
    scheme = _scheme_choosable(scheme)
    stored, shown = _secret_for(scheme=scheme, secret=secret)
    try:
        with transaction.atomic():
            endpoint = WebhookEndpoint.objects.create(workspace=workspace, slug=slug, scheme=scheme,
                                                      secret_encrypted=encrypt_text(stored), created_by=created_by)
    except IntegrityError:
        raise InvalidInput("Slug taken.",
                           details={"slug": ["This workspace has an endpoint with this slug."]}) from None
    return IssuedSecret(endpoint=endpoint, secret=shown)


def webhook_endpoint_rotate(*, endpoint: WebhookEndpoint, previous_valid_for: timedelta = DEFAULT_ROTATION_GRACE,
                            secret: str | None = None) -> IssuedSecret:
    """A new current secret (made by River, or for ``github`` and ``stripe`` the sender's
    new one, supplied); the one it replaces stays valid for ``previous_valid_for`` (zero
    ends it now). A secret older than that, from an earlier rotation, ends now."""
    if not timedelta(0) <= previous_valid_for <= MAX_ROTATION_GRACE:
        raise InvalidInput("Grace period out of range.", details={"previous_valid_seconds": [
            f"Between 0 and {int(MAX_ROTATION_GRACE.total_seconds())} seconds."]})
    now = timezone.now()
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        stored, shown = _secret_for(scheme=endpoint.scheme, secret=secret)
        endpoint.previous_secret_encrypted = endpoint.secret_encrypted if previous_valid_for else ""
        endpoint.previous_secret_expires_at = now + previous_valid_for if previous_valid_for else None
        endpoint.secret_encrypted = encrypt_text(stored)
        endpoint.rotated_at = now
        endpoint.save(update_fields=["previous_secret_encrypted", "previous_secret_expires_at", "secret_encrypted",
                                     "rotated_at"])
    return IssuedSecret(endpoint=endpoint, secret=shown)


def webhook_endpoint_scheme_set(*, endpoint: WebhookEndpoint, scheme: str, secret: str | None = None,
                                ) -> IssuedSecret:
    """Switch the endpoint to another scheme with a fresh secret (the new scheme's:
    made by River for ``standard``, supplied for ``github`` and ``stripe``). The old
    secret ends at once: it belonged to another signing format. ``river_legacy`` cannot
    be chosen."""
    scheme = _scheme_choosable(scheme)
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        if endpoint.scheme == scheme:
            raise InvalidInput("Same scheme.", details={"scheme": [
                f"The endpoint already uses {scheme}; rotate its secret to change only the secret."]})
        stored, shown = _secret_for(scheme=scheme, secret=secret)
        endpoint.scheme = scheme
        endpoint.secret_encrypted = encrypt_text(stored)
        endpoint.previous_secret_encrypted = ""
        endpoint.previous_secret_expires_at = None
        endpoint.rotated_at = timezone.now()
        endpoint.save(update_fields=["scheme", "secret_encrypted", "previous_secret_encrypted",
                                     "previous_secret_expires_at", "rotated_at"])
    logger.info("webhook endpoint %s now uses the %s scheme", endpoint.pk, scheme)
    return IssuedSecret(endpoint=endpoint, secret=shown)


def webhook_endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    endpoint.delete()


# --- verifying a delivery ----------------------------------------------------------------------


def signature_compute(*, secret: str, timestamp: int | str, body: bytes) -> str:
    """river_legacy's hex HMAC-SHA256 of ``"<timestamp>.<body>"`` keyed with the whole
    secret text (what a legacy sender puts after ``v1=``)."""
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def standard_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: the base64 after ``whsec_``."""
    return base64.b64decode(secret.removeprefix(f"{SECRET_PREFIX}_"), validate=True)


def _active_secrets(endpoint: WebhookEndpoint, now: datetime) -> list[str]:
    active = [decrypt_text(endpoint.secret_encrypted)]
    if endpoint.previous_secret_encrypted and endpoint.previous_secret_expires_at and \
            endpoint.previous_secret_expires_at > now:
        active.append(decrypt_text(endpoint.previous_secret_encrypted))
    return active


def _any_matches(expected: list[bytes], candidates: list[bytes]) -> bool:
    """Whether any candidate equals any expected digest, comparing every pair (no early
    exit), so the time taken does not say which secret or entry failed."""
    found = False
    for digest in expected:
        for candidate in candidates:
            found |= hmac.compare_digest(digest, candidate)
    return found


def _refuse(endpoint: WebhookEndpoint, label: str, reason: str, field: str) -> SignatureRefused:
    """Count and log a refused delivery (never the secret or the signature). ``label``
    is the metric's reason (a fixed set); ``field`` names the header at fault."""
    counter = f"river:webhook-refused:{endpoint.pk}"
    try:
        cache.add(counter, 0, timeout=None)
        cache.incr(counter)
    except Exception:  # noqa: BLE001 - a counter never decides a delivery
        logger.debug("webhook refusal counter unavailable", exc_info=True)
    logger.warning("webhook delivery to endpoint %s refused: %s", endpoint.pk, reason)
    webhook_refusal_record(reason=label)
    return SignatureRefused(f"Webhook signature refused: {reason}.", details={field: [reason]})


def webhook_refusals(*, endpoint: WebhookEndpoint) -> int:
    """How many deliveries to the endpoint were refused (since the cache was last cleared)."""
    return int(cache.get(f"river:webhook-refused:{endpoint.pk}") or 0)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value if isinstance(value, str) and value else None


def _fresh(endpoint: WebhookEndpoint, timestamp: str | None, now: datetime, field: str) -> None:
    if timestamp is None or not _TIMESTAMP.match(timestamp):
        raise _refuse(endpoint, "malformed", f"{field} needs unix seconds", field)
    if abs(now.timestamp() - int(timestamp)) > TOLERANCE_SECONDS:
        raise _refuse(endpoint, "stale_timestamp", f"timestamp more than {TOLERANCE_SECONDS} seconds from now",
                      field)


def _verify_standard(endpoint: WebhookEndpoint, headers: Mapping[str, str], body: bytes, now: datetime) -> None:
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        if not _header(headers, name):
            raise _refuse(endpoint, "missing", f"no {name} header", name)
    msg_id, timestamp, signature = (headers[name] for name in ("webhook-id", "webhook-timestamp",
                                                               "webhook-signature"))
    if not _DELIVERY_ID.match(msg_id):
        raise _refuse(endpoint, "malformed", f"webhook-id must be 1 to {EVENT_ID_MAX} printable characters, "
                                             "no spaces", "webhook-id")
    _fresh(endpoint, timestamp, now, "webhook-timestamp")
    if len(signature) > HEADER_MAX:
        raise _refuse(endpoint, "malformed", "webhook-signature is too long", "webhook-signature")
    candidates = []
    for entry in signature.split():
        version, _, encoded = entry.partition(",")
        if version != "v1":
            continue  # another version (v1a: asymmetric) is not ours to check
        try:
            candidates.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue
    if not candidates:
        raise _refuse(endpoint, "malformed", "webhook-signature needs a v1,<base64> entry", "webhook-signature")
    signed = f"{msg_id}.{timestamp}.".encode() + body
    expected = []
    for secret in _active_secrets(endpoint, now):
        try:
            expected.append(hmac.new(standard_key(secret), signed, hashlib.sha256).digest())
        except (binascii.Error, ValueError):
            logger.error("webhook endpoint %s holds a secret that is not whsec_<base64>", endpoint.pk)
    if not _any_matches(expected, candidates):
        raise _refuse(endpoint, "bad_signature", "no signature matches", "webhook-signature")


def _verify_stripe(endpoint: WebhookEndpoint, headers: Mapping[str, str], body: bytes, now: datetime) -> None:
    header = _header(headers, "stripe-signature")
    if header is None:
        raise _refuse(endpoint, "missing", "no Stripe-Signature header", "Stripe-Signature")
    if len(header) > HEADER_MAX:
        raise _refuse(endpoint, "malformed", "Stripe-Signature is too long", "Stripe-Signature")
    timestamp, candidates = None, []
    for part in header.split(","):
        match = _STRIPE_PART.match(part)
        if not match:
            raise _refuse(endpoint, "malformed", "malformed Stripe-Signature header", "Stripe-Signature")
        key, value = match.groups()
        if key == "t":
            timestamp = value
        elif key == "v1" and re.fullmatch(r"[0-9a-fA-F]{64}", value):
            candidates.append(bytes.fromhex(value))
    if timestamp is None or not candidates:
        raise _refuse(endpoint, "malformed", "Stripe-Signature needs t=<unix seconds> and v1=<hex>",
                      "Stripe-Signature")
    _fresh(endpoint, timestamp, now, "Stripe-Signature")
    signed = f"{timestamp}.".encode() + body
    expected = [hmac.new(secret.encode(), signed, hashlib.sha256).digest()
                for secret in _active_secrets(endpoint, now)]
    if not _any_matches(expected, candidates):
        raise _refuse(endpoint, "bad_signature", "no signature matches", "Stripe-Signature")


def _verify_github(endpoint: WebhookEndpoint, headers: Mapping[str, str], body: bytes, now: datetime) -> None:
    header = _header(headers, "x-hub-signature-256")
    if header is None:
        raise _refuse(endpoint, "missing", "no X-Hub-Signature-256 header", "X-Hub-Signature-256")
    match = _GITHUB_SIGNATURE.match(header) if len(header) <= HEADER_MAX else None
    if not match:
        raise _refuse(endpoint, "malformed", "X-Hub-Signature-256 needs sha256=<hex>", "X-Hub-Signature-256")
    expected = [hmac.new(secret.encode(), body, hashlib.sha256).digest() for secret in _active_secrets(endpoint, now)]
    if not _any_matches(expected, [bytes.fromhex(match.group(1))]):
        raise _refuse(endpoint, "bad_signature", "no signature matches", "X-Hub-Signature-256")


def _verify_legacy(endpoint: WebhookEndpoint, headers: Mapping[str, str], body: bytes, now: datetime) -> None:
    signature_header = _header(headers, "x-river-signature")
    if not signature_header:
        raise _refuse(endpoint, "missing", "no X-River-Signature header", "X-River-Signature")
    if len(signature_header) > 1000:
        raise _refuse(endpoint, "malformed", "malformed X-River-Signature header", "X-River-Signature")
    timestamp, candidates = None, []
    for part in signature_header.split(","):
        match = _SIGNATURE_PART.match(part)
        if not match:
            raise _refuse(endpoint, "malformed", "malformed X-River-Signature header", "X-River-Signature")
        if match.group(1) == "t":
            timestamp = match.group(2)
        else:
            candidates.append(match.group(2).lower().encode())
    if timestamp is None or not timestamp.isdigit() or len(timestamp) > 12 or not candidates:
        raise _refuse(endpoint, "malformed", "X-River-Signature needs t=<unix seconds> and v1=<hex>",
                      "X-River-Signature")
    _fresh(endpoint, timestamp, now, "X-River-Signature")
    expected = [signature_compute(secret=secret, timestamp=timestamp, body=body).encode()
                for secret in _active_secrets(endpoint, now)]
    if not _any_matches(expected, candidates):
        raise _refuse(endpoint, "bad_signature", "no signature matches", "X-River-Signature")


_VERIFIERS: dict[str, Callable[[WebhookEndpoint, Mapping[str, str], bytes, datetime], None]] = {
    WebhookScheme.STANDARD: _verify_standard,
    WebhookScheme.STRIPE: _verify_stripe,
    WebhookScheme.GITHUB: _verify_github,
    WebhookScheme.RIVER_LEGACY: _verify_legacy,
}

# The header a 401 names in WWW-Authenticate, per scheme.
SIGNATURE_HEADERS = {WebhookScheme.STANDARD: "webhook-signature", WebhookScheme.STRIPE: "Stripe-Signature",
                     WebhookScheme.GITHUB: "X-Hub-Signature-256", WebhookScheme.RIVER_LEGACY: "X-River-Signature"}


def _lowered(headers: Mapping[str, str]) -> dict[str, str]:
    return {str(name).lower(): value for name, value in headers.items()}


def webhook_verify(*, endpoint: WebhookEndpoint, headers: Mapping[str, str], body: bytes,
                   now: datetime | None = None) -> None:
    """Raise SignatureRefused unless the delivery carries what the endpoint's scheme
    signs, made with one of its active secrets (and, where the scheme has one, a
    timestamp within TOLERANCE_SECONDS of now). Header names are matched in any case."""
    _VERIFIERS[endpoint.scheme](endpoint, _lowered(headers), body, now or timezone.now())


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


def _json_object(body: bytes) -> dict:
    payload = json_strict_parse(body)
    if not isinstance(payload, dict):
        raise InvalidInput("The body must be a JSON object.", details={"body": ["A JSON object is required."]})
    return payload


def _event_type(value: object, *, field: str, how: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("No event type.", details={field: [how]})
    value = value.strip()
    if len(value) > EVENT_TYPE_MAX:
        raise InvalidInput("Event type too long.", details={field: [f"At most {EVENT_TYPE_MAX} characters."]})
    return value


def webhook_event_parse(*, body: bytes, type_header: str | None, id_header: str | None) -> Event:
    """river_legacy's event: a JSON object, its type (header, else ``type``) and id
    (header, else ``id``); neither header is signed. Anything else is a 400 naming what
    is wrong."""
    payload = _json_object(body)
    event_type = _event_type(type_header if type_header else payload.get("type"), field="type",
                             how="Send X-River-Event-Type or a 'type' field in the body.")
    event_id = id_header if id_header else payload.get("id")
    if isinstance(event_id, bool) or (event_id is not None and not isinstance(event_id, str | int)):
        raise InvalidInput("Invalid event id.", details={"id": ["A string or a whole number."]})
    event_id = str(event_id).strip() if event_id is not None else None
    if event_id is not None and not (0 < len(event_id) <= EVENT_ID_MAX):
        raise InvalidInput("Invalid event id.", details={"id": [f"1 to {EVENT_ID_MAX} characters."]})
    return Event(event_type=event_type, event_id=event_id, payload=payload)


def _event_standard(headers: Mapping[str, str], body: bytes) -> Event:
    """The Standard Webhooks payload convention ``{"type", "timestamp", "data"}``: the
    type is the signed ``type``, a trigger sees ``data`` as ``payload``, the signed
    ``webhook-id`` is the event id."""
    envelope = _json_object(body)
    event_type = _event_type(envelope.get("type"), field="type", how="A 'type' string in the body is required.")
    data = envelope.get("data")
    if not isinstance(data, dict):
        raise InvalidInput("No event data.", details={"data": ["A 'data' JSON object in the body is required."]})
    return Event(event_type=event_type, event_id=headers["webhook-id"], payload=data)


def _event_stripe(headers: Mapping[str, str], body: bytes) -> Event:
    """A Stripe event: its signed ``type`` and ``id``; the payload is the whole event
    (``payload.data.object`` is the object it is about)."""
    event = _json_object(body)
    event_type = _event_type(event.get("type"), field="type", how="A Stripe event has a 'type' string.")
    event_id = event.get("id")
    if not isinstance(event_id, str) or not _DELIVERY_ID.match(event_id):
        raise InvalidInput("Invalid event id.", details={"id": [
            f"A Stripe event has an 'id' string of 1 to {EVENT_ID_MAX} printable characters."]})
    return Event(event_type=event_type, event_id=event_id, payload=event)


def _event_github(headers: Mapping[str, str], body: bytes) -> Event:
    """A GitHub delivery: the type is ``X-GitHub-Event`` and the id ``X-GitHub-Delivery``
    (both unsigned: _github_bind ties them to the signed body); the payload is the whole
    body."""
    event_type = _header(headers, "x-github-event")
    if event_type is None or not _GITHUB_EVENT.match(event_type):
        raise InvalidInput("No event type.", details={"X-GitHub-Event": [
            "GitHub's event name is required (lowercase letters, digits and underscores)."]})
    delivery_id = _header(headers, "x-github-delivery")
    if delivery_id is None or not _DELIVERY_ID.match(delivery_id):
        raise InvalidInput("No delivery id.", details={"X-GitHub-Delivery": [
            f"GitHub's delivery id is required (1 to {EVENT_ID_MAX} printable characters)."]})
    return Event(event_type=event_type, event_id=delivery_id, payload=_json_object(body))


def _event_legacy(headers: Mapping[str, str], body: bytes) -> Event:
    return webhook_event_parse(body=body, type_header=_header(headers, "x-river-event-type"),
                               id_header=_header(headers, "x-river-event-id"))


_PARSERS: dict[str, Callable[[Mapping[str, str], bytes], Event]] = {
    WebhookScheme.STANDARD: _event_standard,
    WebhookScheme.STRIPE: _event_stripe,
    WebhookScheme.GITHUB: _event_github,
    WebhookScheme.RIVER_LEGACY: _event_legacy,
}


def _github_bind(*, endpoint: WebhookEndpoint, body: bytes, event: Event, now: datetime) -> None:
    """Tie a verified GitHub body to the id and type it first came with. GitHub's
    redelivery repeats both (same body, same X-GitHub-Delivery), and goes on to the
    per-trigger dedupe; the same signed body under another id or type is a replay with
    rewritten headers and is refused. Rows older than GITHUB_DELIVERY_WINDOW are pruned
    here, so a body older than that could be replayed: the residual risk docs/triggers.md
    states."""
    digest = hashlib.sha256(body).hexdigest()
    WebhookDelivery.objects.filter(endpoint=endpoint, received_at__lt=now - GITHUB_DELIVERY_WINDOW).delete()
    seen, created = WebhookDelivery.objects.get_or_create(
        endpoint=endpoint, body_sha256=digest,
        defaults={"delivery_id": event.event_id, "event_type": event.event_type, "received_at": now})
    if not created and (seen.delivery_id, seen.event_type) != (event.event_id, event.event_type):
        field = "X-GitHub-Delivery" if seen.delivery_id != event.event_id else "X-GitHub-Event"
        raise _refuse(endpoint, "replayed", f"this signed body was delivered before with another {field}", field)


def webhook_receive(*, endpoint: WebhookEndpoint, body: bytes, headers: Mapping[str, str],
                    now: datetime | None = None) -> list[TriggerFiring]:
    """Verify, parse, then fire every matching event trigger. Returns their firings."""
    if len(body) > BODY_MAX_BYTES:
        raise BodyTooLarge(f"The body is larger than {BODY_MAX_BYTES} bytes.",
                           details={"body": [f"At most {BODY_MAX_BYTES} bytes."]})
    now = now or timezone.now()
    headers = _lowered(headers)
    _VERIFIERS[endpoint.scheme](endpoint, headers, body, now)
    event = _PARSERS[endpoint.scheme](headers, body)
    if endpoint.scheme == WebhookScheme.GITHUB:
        _github_bind(endpoint=endpoint, body=body, event=event, now=now)
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

"""API keys and the API trigger: ``POST /api/v1/triggers/{id}/invoke`` with ``X-API-Key``.

Keys look like ``rtk_<prefix>_<secret>``: the prefix is stored in clear for a one-row
lookup, the whole key only as a SHA-256 digest compared in constant time. A trigger key
is not an access token (``rvr_...``): it authenticates nothing but an invoke.

An invoke, in order: the key (401 when missing, unknown or revoked, all alike), the
trigger within the key's scope (403 otherwise, the same answer whether the trigger
exists elsewhere or not at all), its type (409 unless api), the key's per-minute limit
and the trigger's own cap (429 with Retry-After, a ``rate_limited`` firing), the payload
against the trigger's JSON Schema (400 naming each failing path, a ``schema_invalid``
firing), then ``trigger_fire``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from common.jsonschema_safe import schema_errors
from governance.counters import counter_try_consume
from rivercore.errors import Conflict, InvalidInput, NotFound, PermissionDenied, RiverError
from tenancy.models import Organization, Workspace
from triggers.models import ApiKey, Trigger, TriggerFiring
from triggers.services import trigger_fire, trigger_firing_skip
from triggers.types import ApiConfig, TriggerType

KEY_PREFIX = "rtk"  # noqa: S105 - a public marker, not a secret
WINDOW_SECONDS = 60
MAX_SCHEMA_ERRORS = 20


class NotAuthenticated(RiverError):
    status_code = 401
    code = "authentication_failed"


class RateLimited(RiverError):
    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message, details={"retry_after": [str(retry_after)]})
        self.retry_after = retry_after


class TriggerNotInvocable(Conflict):
    code = "trigger_not_invocable"


INVALID_KEY = "Invalid API key."
OUT_OF_SCOPE = "This key may not invoke this trigger."


@dataclass(frozen=True)
class IssuedKey:
    key: ApiKey
    plaintext: str  # shown once, never stored


def _digest(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def api_key_issue(*, created_by, name: str, workspace: Workspace | None = None,
                  organization: Organization | None = None, rate_limit_per_minute: int | None = None) -> IssuedKey:
    """A key for one workspace, or (``organization`` without ``workspace``) for all of an
    organization's. The caller checked who may issue it."""
    if workspace is not None:
        organization = workspace.organization
    if organization is None:
        raise InvalidInput("A key belongs to a workspace or an organization.",
                           details={"workspace": ["Give a workspace, or an organization."]})
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise InvalidInput("Invalid name.", details={"name": ["1 to 100 characters."]})
    prefix = secrets.token_hex(6)
    plaintext = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(organization=organization, workspace=workspace, name=name, prefix=prefix,
                                digest=_digest(plaintext), rate_limit_per_minute=rate_limit_per_minute,
                                created_by=created_by)
    return IssuedKey(key=key, plaintext=plaintext)


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().get(pk=key.pk)
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])
    return key


def api_key_authenticate(*, plaintext: str | None) -> ApiKey:
    """The live key for ``plaintext``; NotAuthenticated (one message for every reason)
    otherwise."""
    parts = (plaintext or "").strip().split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or len(parts[1]) > 16:
        raise NotAuthenticated(INVALID_KEY)
    key = ApiKey.objects.filter(prefix=parts[1]).first()
    # Compared even when no row matched, so a wrong prefix costs the same as a wrong secret.
    expected = key.digest if key is not None else "0" * 64
    if not hmac.compare_digest(expected, _digest(plaintext.strip())) or key is None or key.revoked_at is not None:
        raise NotAuthenticated(INVALID_KEY)
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key


def _trigger_in_scope(*, key: ApiKey, trigger_id) -> Trigger:
    from triggers.selectors import trigger_get

    try:
        trigger = trigger_get(trigger_id=trigger_id)
    except NotFound:
        raise PermissionDenied(OUT_OF_SCOPE) from None
    in_scope = (trigger.workspace.organization_id == key.organization_id
                and (key.workspace_id is None or key.workspace_id == trigger.workspace_id))
    if not in_scope:
        raise PermissionDenied(OUT_OF_SCOPE)
    return trigger


def _retry_after(now: datetime) -> int:
    return WINDOW_SECONDS - int(now.timestamp()) % WINDOW_SECONDS


def _schema_errors(schema: dict, payload) -> dict[str, list[str]]:
    return schema_errors(schema, payload, prefix="payload")


def trigger_invoke(*, plaintext_key: str | None, trigger_id, payload, idempotency_key: str | None = None,
                   now: datetime | None = None) -> TriggerFiring:
    """Fire an API trigger for the holder of a key (see the module docstring for the
    order of checks). Returns the firing: started, or skipped (duplicate, inactive agent)."""
    key = api_key_authenticate(plaintext=plaintext_key)
    trigger = _trigger_in_scope(key=key, trigger_id=trigger_id)
    if trigger.type != TriggerType.API:
        raise TriggerNotInvocable("Only an API trigger is invoked with a key.")
    if not trigger.enabled:
        trigger_firing_skip(trigger=trigger, source=f"api:{trigger.name}", reason=TriggerFiring.Reason.DISABLED,
                            detail=f"invoked with key {key.prefix} while disabled", payload=payload)
        raise TriggerNotInvocable("The trigger is disabled.", code="trigger_disabled")
    source = f"api:{trigger.name}"
    now = now or timezone.now()
    config: ApiConfig = ApiConfig.model_validate(trigger.config)
    key_limit = key.rate_limit_per_minute or trigger.workspace.api_trigger_rate_limit_per_minute
    limits = [(f"trigger-api-key:{key.pk}", key_limit, f"key {key.prefix} is over {key_limit} calls a minute")]
    if config.rate_limit_per_minute:
        limits.append((f"trigger-api:{trigger.pk}", config.rate_limit_per_minute,
                       f"trigger is over {config.rate_limit_per_minute} calls a minute"))
    for counter, limit, why in limits:
        allowed, _ = counter_try_consume(key=counter, window=WINDOW_SECONDS, limit=limit, now=now)
        if not allowed:
            trigger_firing_skip(trigger=trigger, source=source, reason=TriggerFiring.Reason.RATE_LIMITED,
                                detail=why, payload=payload)
            raise RateLimited(f"Rate limit reached: {why}.", retry_after=_retry_after(now))
    if config.input_schema is not None:
        errors = _schema_errors(config.input_schema, payload)
        if errors:
            summary = "; ".join(f"{path}: {msgs[0]}" for path, msgs in errors.items())
            trigger_firing_skip(trigger=trigger, source=source, reason=TriggerFiring.Reason.SCHEMA_INVALID,
                                detail=summary, payload=payload)
            raise InvalidInput("The payload does not match the trigger's input schema.", details=errors)
    dedupe = f"idem:{key.pk}:{idempotency_key}" if idempotency_key else None
    return trigger_fire(trigger=trigger, payload=payload, source=source, dedupe_key=dedupe, triggered_at=now)

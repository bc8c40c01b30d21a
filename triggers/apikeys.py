"""API keys and the API trigger: ``POST /api/v1/triggers/{id}/invoke`` with ``X-API-Key``.

Keys look like ``rtk_<prefix>_<secret>``: the prefix is stored in clear for a one-row
lookup, the whole key only as a SHA-256 digest compared in constant time. A trigger key
is not an access token (``rvr_...``): it authenticates nothing but an invoke.

A key lends its owner's (``created_by``) authority, read at every call: it stops
working (401, like any invalid key) once its owner is deleted, deactivated, or no longer
holds the standing it was issued with (``agent:execute`` in the key's workspace; an
organization admin for an organization's key).

An invoke, in order: the key (401 when missing, unknown, revoked or its owner gone, all
alike), the trigger within the key's scope (403 otherwise, the same answer whether the
trigger exists elsewhere or not at all), its type (409 unless api), enabled (409), the
owner's role against the role the trigger's runs act with (403 naming ``run_as_role``),
the trigger's own cap then the key's per-minute limit (429 with Retry-After; a call one
refuses uses neither budget), the payload against the trigger's JSON Schema (400 naming
each failing path, a ``schema_invalid`` firing), then ``trigger_fire`` with the owner as
the run's requester. A call refused as disabled or rate limited writes no firing: it is
counted on the trigger (``refused_invocations``) and in the firings metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from common.jsonschema_safe import schema_errors
from common.secrets import secret_issue, secret_verify
from governance.counters import counter_hit, counter_try_consume
from rivercore.errors import Conflict, InvalidInput, NotFound, PermissionDenied, RiverError
from telemetry.metrics import trigger_firing_record
from tenancy.models import Organization, Workspace
from tenancy.permissions import AGENT_EXECUTE, role_rank
from tenancy.selectors import is_org_admin, role_highest, workspace_permissions
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
    issued = secret_issue(marker=KEY_PREFIX)
    key = ApiKey.objects.create(organization=organization, workspace=workspace, name=name, prefix=issued.prefix,
                                digest=issued.digest, rate_limit_per_minute=rate_limit_per_minute,
                                created_by=created_by)
    return IssuedKey(key=key, plaintext=issued.plaintext)


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().get(pk=key.pk)
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])
    return key


def _key_by_prefix(prefix: str) -> ApiKey | None:
    return ApiKey.objects.select_related("created_by", "workspace").filter(prefix=prefix).first()


def api_key_authenticate(*, plaintext: str | None) -> ApiKey:
    """The live key for ``plaintext``; NotAuthenticated (one message for every reason)
    otherwise. An unknown prefix and a wrong secret cost the same
    (common.secrets.secret_verify)."""
    key = secret_verify(plaintext=plaintext, marker=KEY_PREFIX, lookup=_key_by_prefix)
    if key is None or key.revoked_at is not None:
        raise NotAuthenticated(INVALID_KEY)
    if not api_key_owner_standing(key=key):
        raise NotAuthenticated(INVALID_KEY)
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key


def api_key_owner_standing(*, key: ApiKey) -> bool:
    """Whether the key's owner still holds what issuing it required, now: an active
    account with ``agent:execute`` in the key's workspace, or, for an organization's key,
    organization admin. A deleted owner (``created_by`` None) holds nothing."""
    owner = key.created_by
    if owner is None or not owner.is_active:
        return False
    if key.workspace_id is None:
        return is_org_admin(user=owner, organization_id=key.organization_id)
    return AGENT_EXECUTE in workspace_permissions(user=owner, workspace=key.workspace)


def _owner_authority_check(*, key: ApiKey, trigger: Trigger) -> None:
    """403 naming ``run_as_role`` when the trigger's runs act with a role (as they act
    now) above the one the key's owner holds in the trigger's workspace: a key never
    borrows an authority its owner does not hold."""
    held = role_highest(user=key.created_by, workspace=trigger.workspace)
    acting = role_highest(user=trigger.run_as.user, workspace=trigger.workspace)
    if acting is not None and (held is None or role_rank(acting) > role_rank(held)):
        raise PermissionDenied(
            "This trigger's runs act with a role above the key owner's.", code="run_as_role_above_key_owner",
            details={"run_as_role": [f"The trigger runs as {acting}; the key's owner holds {held or 'no role'} "
                                     "in its workspace."]})


def _refused_counted(*, trigger: Trigger, reason: str, now: datetime) -> None:
    """A refused invocation: one more on the trigger's count and in the firings metric
    (outcome ``refused``), no firing row."""
    Trigger.objects.filter(pk=trigger.pk).update(refused_invocations=F("refused_invocations") + 1,
                                                 last_refused_at=now)
    trigger_firing_record(trigger_type=str(trigger.type), outcome="refused", reason=str(reason))


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
    now = now or timezone.now()
    if not trigger.enabled:
        _refused_counted(trigger=trigger, reason=TriggerFiring.Reason.DISABLED, now=now)
        raise TriggerNotInvocable("The trigger is disabled.", code="trigger_disabled")
    _owner_authority_check(key=key, trigger=trigger)
    source = f"api:{trigger.name}"
    config: ApiConfig = ApiConfig.model_validate(trigger.config)
    # The trigger's own cap first: a call it refuses never touches the key's budget; a
    # call the key's limit refuses gives back what it took from the trigger's.
    key_limit = key.rate_limit_per_minute or trigger.workspace.api_trigger_rate_limit_per_minute
    limits = []
    if config.rate_limit_per_minute:
        limits.append((f"trigger-api:{trigger.pk}", config.rate_limit_per_minute,
                       f"trigger is over {config.rate_limit_per_minute} calls a minute"))
    limits.append((f"trigger-api-key:{key.pk}", key_limit, f"key {key.prefix} is over {key_limit} calls a minute"))
    consumed: list[str] = []
    for counter, limit, why in limits:
        allowed, _ = counter_try_consume(key=counter, window=WINDOW_SECONDS, limit=limit, now=now)
        if not allowed:
            for taken in consumed:
                counter_hit(key=taken, window=WINDOW_SECONDS, amount=-1, now=now)
            _refused_counted(trigger=trigger, reason=TriggerFiring.Reason.RATE_LIMITED, now=now)
            raise RateLimited(f"Rate limit reached: {why}.", retry_after=_retry_after(now))
        consumed.append(counter)
    if config.input_schema is not None:
        errors = _schema_errors(config.input_schema, payload)
        if errors:
            summary = "; ".join(f"{path}: {msgs[0]}" for path, msgs in errors.items())
            trigger_firing_skip(trigger=trigger, source=source, reason=TriggerFiring.Reason.SCHEMA_INVALID,
                                detail=summary, payload=payload)
            raise InvalidInput("The payload does not match the trigger's input schema.", details=errors)
    dedupe = f"idem:{key.pk}:{idempotency_key}" if idempotency_key else None
    return trigger_fire(trigger=trigger, payload=payload, source=source, dedupe_key=dedupe, triggered_at=now,
                        requester=key.created_by)

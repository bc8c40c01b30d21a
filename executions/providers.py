"""LLM provider configuration: reads and writes, managed by organization admins.

The API key is encrypted at rest (common.crypto) and never returned; callers see
only whether one is set. The model router decrypts it when it builds a request.
"""

from __future__ import annotations

from django.db import IntegrityError, connection, transaction
from django.db.models import Q, QuerySet

from common.crypto import encrypt_text
from executions.models import LLMProvider, ProviderCallWindow
from rivercore.errors import InvalidInput, NotFound, PermissionDenied
from rivercore.types.agents import Tier
from tenancy.models import Organization
from tenancy.selectors import is_org_admin, organizations_administered, workspaces_for_user

_UNSET = object()
_FIELDS = ("base_url", "priority", "max_retries", "timeout_seconds", "rate_limit_rpm", "enabled")


# ---------------------------------------------------------------- reads


def organizations_visible(*, user) -> QuerySet[Organization]:
    """Organizations the user belongs to through a workspace or an organization membership."""
    if not user.is_authenticated:
        return Organization.objects.none()
    return Organization.objects.filter(
        Q(pk__in=workspaces_for_user(user=user).values("organization_id")) | Q(members__user=user)
    ).distinct()


def llm_providers_for_admin(*, user) -> QuerySet[LLMProvider]:
    """Providers of the organizations the user administers."""
    return LLMProvider.objects.filter(organization__in=organizations_administered(user=user)).order_by(
        "organization_id", "priority", "id"
    )


def _org_standing(*, user, organization_id: int) -> str:
    if is_org_admin(user=user, organization_id=organization_id):
        return "admin"
    if organizations_visible(user=user).filter(pk=organization_id).exists():
        return "member"
    return "none"


def llm_provider_get_for_admin(*, user, provider_id) -> LLMProvider:
    """The provider if the user administers its organization.

    404 when the organization is not one the user belongs to (its existence is not
    confirmed); 403 when they belong to it but are not an admin there.
    """
    try:
        provider = LLMProvider.objects.select_related("organization").get(pk=int(provider_id))
    except (LLMProvider.DoesNotExist, TypeError, ValueError):
        raise NotFound("LLM provider not found.") from None
    standing = _org_standing(user=user, organization_id=provider.organization_id)
    if standing == "none":
        raise NotFound("LLM provider not found.")
    if standing == "member":
        raise PermissionDenied("Only organization admins manage LLM providers.")
    return provider


def organization_get_for_provider_admin(*, user, organization_id) -> Organization:
    """The organization named in a provider body, if the user administers it.

    An organization the user does not belong to is reported as an unknown value of
    the ``organization`` field (400), one they belong to without admin rights as 403.
    """
    try:
        organization_id = int(organization_id)
    except (TypeError, ValueError):
        organization_id = None
    standing = "none" if organization_id is None else _org_standing(user=user, organization_id=organization_id)
    if standing == "none":
        raise InvalidInput("Unknown organization.", details={"organization": ["Organization not found."]})
    if standing == "member":
        raise PermissionDenied("Only organization admins manage LLM providers.")
    return Organization.objects.get(pk=organization_id)


# ---------------------------------------------------------------- writes


def provider_models_parse(models: dict | None) -> dict[str, str]:
    """The tier -> model id map; keys must be River's tiers, values non-empty model ids."""
    if models is None:
        return {}
    if not isinstance(models, dict):
        raise InvalidInput("models must be an object.", details={"models": ["Expected an object of tier -> model."]})
    tiers = [tier.value for tier in Tier]
    errors = []
    for key, value in models.items():
        if key not in tiers:
            errors.append(f'"{key}" is not a tier; use {", ".join(tiers)}.')
        elif not isinstance(value, str) or not value.strip():
            errors.append(f"The model for {key} must be a non-empty string.")
    if errors:
        raise InvalidInput("models is invalid.", details={"models": errors})
    return {key: value.strip() for key, value in models.items()}


def _save(provider: LLMProvider, *, update_fields: list[str] | None = None) -> LLMProvider:
    try:
        with transaction.atomic():
            if update_fields is None:
                provider.save(force_insert=True)
            else:
                provider.save(update_fields=update_fields)
    except IntegrityError:
        raise InvalidInput(
            "This organization already has a provider with that name.",
            details={"provider_name": ["Already configured in this organization."]},
        ) from None
    return provider


def llm_provider_create(
    *,
    organization: Organization,
    provider_name: str,
    api_key: str = "",
    base_url: str = "",
    models: dict | None = None,
    priority: int = 1,
    max_retries: int = 2,
    timeout_seconds: int = 30,
    rate_limit_rpm: int = 60,
    enabled: bool = True,
) -> LLMProvider:
    if not provider_name.strip():
        raise InvalidInput("provider_name is required.", details={"provider_name": ["This field may not be blank."]})
    provider = LLMProvider(
        organization=organization,
        provider_name=provider_name.strip(),
        api_key_encrypted=encrypt_text(api_key) if api_key else "",
        base_url=base_url,
        tier_models=provider_models_parse(models),
        priority=priority,
        max_retries=max_retries,
        timeout_seconds=timeout_seconds,
        rate_limit_rpm=rate_limit_rpm,
        enabled=enabled,
    )
    return _save(provider)


def llm_provider_update(
    *,
    provider: LLMProvider,
    provider_name=_UNSET,
    api_key=_UNSET,
    models=_UNSET,
    **changes,
) -> LLMProvider:
    """Apply the given fields; omitted ones stay. ``api_key=""`` removes the stored key."""
    unknown = set(changes) - set(_FIELDS)
    if unknown:
        raise TypeError(f"llm_provider_update got unexpected fields: {', '.join(sorted(unknown))}")
    update_fields = list(changes)
    for field, value in changes.items():
        setattr(provider, field, value)
    if provider_name is not _UNSET:
        if not provider_name.strip():
            raise InvalidInput(
                "provider_name is required.", details={"provider_name": ["This field may not be blank."]}
            )
        provider.provider_name = provider_name.strip()
        update_fields.append("provider_name")
    if models is not _UNSET:
        provider.tier_models = provider_models_parse(models)
        update_fields.append("tier_models")
    if api_key is not _UNSET:
        provider.api_key_encrypted = encrypt_text(api_key) if api_key else ""
        update_fields.append("api_key_encrypted")
    if not update_fields:
        return provider
    return _save(provider, update_fields=update_fields)


def llm_provider_delete(*, provider: LLMProvider) -> None:
    provider.delete()


# ---------------------------------------------------------------- rate limit


def provider_call_acquire(*, provider_key: str, limit: int, window_start: int) -> bool:
    """Take one request slot of the provider's minute starting at ``window_start``;
    False when ``limit`` slots are already taken (the request must not be sent).

    One statement, so concurrent workers cannot both take the last slot: the upsert
    either inserts the minute's row with 1, or adds 1 only while the count is below
    the limit; no row returned means the limit was reached. The first call of a new
    minute drops the provider's older rows, so the table holds about one row per
    provider. Runs in autocommit (the router is called outside transactions), so the
    slot is taken even if the caller's work later fails: a sent request counts.
    """
    table = connection.ops.quote_name(ProviderCallWindow._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (provider_key, window_start, calls) VALUES (%s, %s, 1) "  # noqa: S608 - table name from the model
            f"ON CONFLICT (provider_key, window_start) DO UPDATE SET calls = {table}.calls + 1 "
            f"WHERE {table}.calls < %s RETURNING calls",
            [provider_key, window_start, limit],
        )
        row = cursor.fetchone()
    if row is None:
        return False
    if row[0] == 1:
        ProviderCallWindow.objects.filter(provider_key=provider_key, window_start__lt=window_start).delete()
    return True

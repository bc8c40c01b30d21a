"""Writes for tenancy: access tokens and memberships."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from common.compiled import CompiledQuery
from common.secrets import secret_issue, secret_verify
from rivercore.errors import InvalidInput, NotFound, PermissionDenied
from tenancy.models import AccessToken, Membership, ServicePrincipal, Workspace
from tenancy.permissions import ROLE_ORDER, role_rank
from tenancy.selectors import role_highest, user_is_service_principal

TOKEN_PREFIX = "rvr"  # noqa: S105 - a public marker, not a secret


@dataclass(frozen=True)
class IssuedToken:
    token: AccessToken
    plaintext: str  # shown once, never stored


def token_issue(
    *, user, name: str = "token", kind: str = AccessToken.Kind.PERSONAL, expires_at: datetime | None = None
) -> IssuedToken:
    if user_is_service_principal(user=user):
        raise InvalidInput("A trigger's service identity cannot hold a token.", code="service_principal",
                           details={"user": ["This is a trigger's service identity; it never signs in."]})
    issued = secret_issue(marker=TOKEN_PREFIX)
    token = AccessToken.objects.create(
        user=user, name=name, kind=kind, prefix=issued.prefix, digest=issued.digest, expires_at=expires_at
    )
    return IssuedToken(token=token, plaintext=issued.plaintext)


# Every API request looks its token up: compiled once, not per request (common.compiled).
_TOKEN_BY_PREFIX = CompiledQuery(
    lambda prefix: AccessToken.objects.select_related("user", "user__service_principal")
    .filter(prefix=prefix).order_by()[:1],
    prefix="\x00token-prefix",  # no real prefix holds a NUL (12 hex characters)
)


def _token_by_prefix(prefix: str) -> AccessToken | None:
    return _TOKEN_BY_PREFIX.first(prefix=prefix)


def token_authenticate(*, plaintext: str | None) -> AccessToken | None:
    """The active token for ``plaintext``, or None. Marks it used at most once a minute.
    An unknown prefix and a wrong secret cost the same (common.secrets.secret_verify)."""
    token = secret_verify(plaintext=plaintext, marker=TOKEN_PREFIX, lookup=_token_by_prefix)
    if token is None:
        return None
    if not token.is_active or not token.user.is_active:
        return None
    if hasattr(token.user, "service_principal"):  # never issued one; refused if one appears anyway
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        AccessToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def token_revoke(*, user, token_id: int) -> AccessToken:
    with transaction.atomic():
        token = AccessToken.objects.select_for_update().filter(pk=token_id, user=user).first()
        if token is None:
            raise NotFound("Token not found.")
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
    return token


# --- service principals: the identity a trigger's runs act as ------------------------------

RUN_AS_FIELD = "run_as_role"


def run_as_role_check(*, actor, workspace: Workspace, role: str, field: str = RUN_AS_FIELD) -> None:
    """Refuse a run-as role that is not a workspace role (400 naming ``field``) or that
    is above ``actor``'s own current standing in the workspace (403 naming ``field``):
    nobody hands out more than they hold."""
    if role not in ROLE_ORDER:
        raise InvalidInput("Unknown role.", details={field: [f"Choose one of: {', '.join(ROLE_ORDER)}."]})
    held = role_highest(user=actor, workspace=workspace)
    if held is None or role_rank(role) > role_rank(held):
        raise PermissionDenied(
            "The run-as role may not exceed your own role in this workspace.",
            details={field: [f"You hold {held or 'no role'} here; {role} is higher."]},
        )


def service_principal_create(*, workspace: Workspace, created_by, label: str, role: str) -> ServicePrincipal:
    """A new identity for one trigger: a user that cannot sign in, a member of
    ``workspace`` with ``role`` (checked against ``created_by``'s own role)."""
    run_as_role_check(actor=created_by, workspace=workspace, role=role)
    with transaction.atomic():
        user = get_user_model()(username=f"trigger-{secrets.token_hex(6)}", is_active=True, is_staff=False,
                                is_superuser=False, first_name=label[:150])
        user.set_unusable_password()
        user.save()
        Membership.objects.create(workspace=workspace, user=user, role=role)
        return ServicePrincipal.objects.create(user=user, workspace=workspace, label=label[:200],
                                               created_by=created_by, responsible=created_by)


def service_principal_role_set(*, principal: ServicePrincipal, actor, role: str) -> ServicePrincipal:
    """Change the identity's workspace role; the same ceiling as at creation applies."""
    run_as_role_check(actor=actor, workspace=principal.workspace, role=role)
    Membership.objects.update_or_create(workspace=principal.workspace, user=principal.user,
                                        defaults={"role": role})
    return principal


def service_principal_rebind(*, principal: ServicePrincipal, actor) -> ServicePrincipal:
    """``actor`` changed the identity's trigger, so it now answers to them: they become
    its responsible person and its role is lowered to theirs when it was higher. The
    caller holds the trigger's row lock and checked that ``actor`` may manage it."""
    held = role_highest(user=actor, workspace=principal.workspace)
    if held is None:
        raise PermissionDenied("You hold no role in this workspace.",
                               details={RUN_AS_FIELD: ["You hold no role here, so no trigger may act for you."]})
    with transaction.atomic():
        membership = Membership.objects.select_for_update().filter(
            workspace=principal.workspace, user=principal.user).first()
        if membership is not None and role_rank(membership.role) > role_rank(held):
            membership.role = held
            membership.save(update_fields=["role"])
        if principal.responsible_id != actor.pk:
            principal.responsible = actor
            principal.save(update_fields=["responsible"])
    return principal


def service_principal_label_set(*, principal: ServicePrincipal, label: str) -> ServicePrincipal:
    principal.label = label[:200]
    principal.save(update_fields=["label"])
    get_user_model().objects.filter(pk=principal.user_id).update(first_name=label[:150])
    return principal


def service_principal_retire(*, principal: ServicePrincipal) -> None:
    """The trigger is gone: its identity loses its membership and is deactivated. The
    rows stay, so the runs it started still name who started them; a run of it still
    waiting holds no role from now on (roles are read live)."""
    with transaction.atomic():
        Membership.objects.filter(user=principal.user).delete()
        get_user_model().objects.filter(pk=principal.user_id).update(is_active=False)
        ServicePrincipal.objects.filter(pk=principal.pk).update(retired_at=timezone.now())

"""Writes for tenancy: access tokens and memberships."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from rivercore.errors import NotFound
from tenancy.models import AccessToken

TOKEN_PREFIX = "rvr"  # noqa: S105 - a public marker, not a secret


@dataclass(frozen=True)
class IssuedToken:
    token: AccessToken
    plaintext: str  # shown once, never stored


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_issue(
    *, user, name: str = "token", kind: str = AccessToken.Kind.PERSONAL, expires_at: datetime | None = None
) -> IssuedToken:
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    plaintext = f"{TOKEN_PREFIX}_{prefix}_{secret}"
    token = AccessToken.objects.create(
        user=user, name=name, kind=kind, prefix=prefix, digest=_digest(plaintext), expires_at=expires_at
    )
    return IssuedToken(token=token, plaintext=plaintext)


def token_authenticate(*, plaintext: str) -> AccessToken | None:
    """The active token for ``plaintext``, or None. Marks it used at most once a minute."""
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        return None
    token = AccessToken.objects.select_related("user").filter(prefix=parts[1]).first()
    if token is None or not hmac.compare_digest(token.digest, _digest(plaintext)):
        return None
    if not token.is_active or not token.user.is_active:
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

"""Who is calling River's MCP server or its A2A endpoints, and whether they may call now.

A caller presents a personal access token (``Authorization: Bearer rvr_...``, as the REST
API takes it) or a trigger API key (``X-API-Key: rtk_...``, or ``Authorization: Bearer
rtk_...``, since many MCP clients can only set a bearer token). A key lends its owner's
authority (``triggers.apikeys``: re-read at every request, 401 once the owner lost it)
and only within its scope: its workspace, or its organization's workspaces. A token acts
as its user in all of the user's workspaces.

Every request is counted against the credential's budget a minute: the key's own limit
(or its workspace's API rate), ``RIVER_INTEROP_REQUESTS_PER_MINUTE`` for a token. One
answer, 401, for a missing, unknown, revoked or expired credential alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from governance.counters import counter_try_consume
from tenancy.services import token_authenticate
from triggers.apikeys import KEY_PREFIX, NotAuthenticated, RateLimited, api_key_authenticate

WINDOW_SECONDS = 60
# A credential is a short line; anything longer is refused before it reaches a lookup.
CREDENTIAL_MAX_LENGTH = 200
MISSING = "Authenticate with a personal access token or an API key (Authorization: Bearer ...)."
INVALID = "Invalid, revoked or expired credential."


@dataclass(frozen=True, kw_only=True)
class Caller:
    """An authenticated caller: the user the runs act as and answer to, and the
    workspaces the credential reaches (None: every workspace of the user's)."""

    user: object
    credential: str  # "token" or "key"
    credential_id: int
    prefix: str
    workspace_id: int | None = None
    organization_id: int | None = None
    requests_per_minute: int

    @property
    def label(self) -> str:
        """How the audit trail names the credential: its kind and public prefix, never
        the secret."""
        return f"{self.credential} {self.prefix}"

    def reaches(self, *, workspace) -> bool:
        if self.workspace_id is not None:
            return workspace.pk == self.workspace_id
        if self.organization_id is not None:
            return workspace.organization_id == self.organization_id
        return True


def _credential_from(*, authorization: str, api_key: str) -> str:
    if api_key:
        return api_key.strip()
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise NotAuthenticated(MISSING)
    return value.strip()


def caller_authenticate(*, authorization: str = "", api_key: str = "") -> Caller:
    """The caller behind the request's ``Authorization`` or ``X-API-Key`` header;
    NotAuthenticated (401) otherwise."""
    credential = _credential_from(authorization=authorization, api_key=api_key)
    if len(credential) > CREDENTIAL_MAX_LENGTH or "\x00" in credential:
        raise NotAuthenticated(INVALID)
    if credential.startswith(f"{KEY_PREFIX}_"):
        key = api_key_authenticate(plaintext=credential)
        limit = key.rate_limit_per_minute or (
            key.workspace.api_trigger_rate_limit_per_minute
            if key.workspace is not None
            else settings.RIVER_INTEROP_REQUESTS_PER_MINUTE
        )
        return Caller(
            user=key.created_by,
            credential="key",
            credential_id=key.pk,
            prefix=key.prefix,
            workspace_id=key.workspace_id,
            organization_id=key.organization_id,
            requests_per_minute=limit,
        )
    token = token_authenticate(plaintext=credential)
    if token is None:
        raise NotAuthenticated(INVALID)
    return Caller(
        user=token.user,
        credential="token",
        credential_id=token.pk,
        prefix=token.prefix,
        requests_per_minute=settings.RIVER_INTEROP_REQUESTS_PER_MINUTE,
    )


def caller_throttle(*, caller: Caller, now=None) -> None:
    """Count one request against the credential's budget this minute; RateLimited (429
    with the seconds to the next window) once it is spent. The count is one atomic
    statement (``governance.counters``), so parallel requests never pass it together."""
    now = now or timezone.now()
    allowed, _ = counter_try_consume(
        key=f"interop-{caller.credential}:{caller.credential_id}",
        window=WINDOW_SECONDS,
        limit=caller.requests_per_minute,
        now=now,
    )
    if not allowed:
        retry_after = WINDOW_SECONDS - int(now.timestamp()) % WINDOW_SECONDS
        raise RateLimited(
            f"Rate limit reached: {caller.requests_per_minute} requests a minute for this {caller.credential}.",
            retry_after=retry_after,
        )

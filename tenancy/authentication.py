"""DRF authentication with personal access tokens: ``Authorization: Bearer <token>``."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from tenancy.services import token_authenticate


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, credential = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None
        credential = credential.strip()
        if not credential:
            raise exceptions.AuthenticationFailed("Bearer token missing.")
        token = token_authenticate(plaintext=credential)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, revoked or expired token.")
        return token.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="api"'

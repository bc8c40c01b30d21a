"""Authentication: DRF with personal access tokens (``Authorization: Bearer <token>``), and
the password backend of sign-in pages and the admin."""

from __future__ import annotations

from django.contrib.auth.backends import ModelBackend
from rest_framework import authentication, exceptions

from tenancy.selectors import user_is_service_principal
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


class PasswordBackend(ModelBackend):
    """Django's username-and-password sign-in, refused to a trigger's service identity
    even if someone gave it a password (in the admin, say): it never signs in."""

    def user_can_authenticate(self, user) -> bool:
        return super().user_can_authenticate(user) and not user_is_service_principal(user=user)

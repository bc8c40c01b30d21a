"""WebSocket routes and how a socket proves who it is.

Two ways in, decided by the subprotocols the client offers:

- ``Sec-WebSocket-Protocol: bearer, <token>`` (API clients, scripts, tests): the
  token is checked with tenancy's token service. A token is not an ambient
  credential, so the Origin header is not consulted.
- Anything else is a browser page: the Origin must be one of ALLOWED_HOSTS (a
  foreign page cannot ride the user's cookies) and the Django session names the user.

Either way the consumer receives ``scope["user"]`` (AnonymousUser when the proof
failed) and ``scope["auth_method"]``; the consumer refuses anonymous sockets.
"""

from __future__ import annotations

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import AllowedHostsOriginValidator
from django.contrib.auth.models import AnonymousUser
from django.urls import path

from executions.consumers import ExecutionConsumer, SessionConsumer, WorkspaceConsumer
from tenancy.services import token_authenticate
from tenancy.sockets import BEARER_SUBPROTOCOL
from web.consumers import FrameConsumer


@database_sync_to_async
def _token_user(plaintext: str):
    token = token_authenticate(plaintext=plaintext) if plaintext else None
    return token.user if token is not None else AnonymousUser()


class _SessionAuth:
    """Marks the scope as session-authenticated for the consumer."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        return await self.inner({**scope, "auth_method": "session"}, receive, send)


class WebSocketAuth:
    """Bearer-subprotocol token auth, or origin-checked session auth."""

    def __init__(self, inner):
        self.inner = inner
        self.browser = AllowedHostsOriginValidator(AuthMiddlewareStack(_SessionAuth(inner)))

    async def __call__(self, scope, receive, send):
        offered = [p.strip() for p in scope.get("subprotocols") or []]
        if offered and offered[0].lower() == BEARER_SUBPROTOCOL:
            user = await _token_user(offered[1] if len(offered) > 1 else "")
            return await self.inner({**scope, "user": user, "auth_method": "bearer"}, receive, send)
        return await self.browser(scope, receive, send)


websocket_urlpatterns = [
    path("ws/executions/<int:execution_id>/", WebSocketAuth(ExecutionConsumer.as_asgi())),
    path("ws/workspace/", WebSocketAuth(WorkspaceConsumer.as_asgi())),
    path("ws/sessions/<int:session_id>/", WebSocketAuth(SessionConsumer.as_asgi())),
    path("ws/frame/", WebSocketAuth(FrameConsumer.as_asgi())),
]

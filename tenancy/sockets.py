"""How every River WebSocket consumer opens and closes (the run, workspace and session
feeds in ``executions.consumers``, the page frame's in ``web.consumers``).

``riverapp.routing`` has already proved who the socket is (``scope["user"]``, and
``scope["auth_method"]``: ``"bearer"`` or ``"session"``). ``connect`` refuses an
anonymous socket, then asks the consumer which groups this user may join
(``authorized_groups``: None refuses, before accepting, whether the object is someone
else's or does not exist), joins them all, accepts (echoing the ``bearer`` subprotocol a
token client offered, as the WebSocket handshake requires) and calls ``after_accept``.
The feeds are server-to-client only: what a client sends is ignored.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer

BEARER_SUBPROTOCOL = "bearer"


def query_param(scope, name: str) -> str | None:
    """The last value of ``name`` in the socket's query string, or None."""
    values = parse_qs(scope.get("query_string", b"").decode("latin1")).get(name)
    return values[-1] if values else None


class AuthorizedSocketConsumer(AsyncWebsocketConsumer):
    groups_joined: list[str]

    async def authorized_groups(self) -> list[str] | None:
        """The channel-layer groups the (signed-in) user may listen to; None refuses."""
        raise NotImplementedError

    async def after_accept(self) -> None:
        """Runs once the socket is open and in its groups (a replay of stored events)."""
        return None

    async def connect(self):
        self.groups_joined = []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        groups = await self.authorized_groups()
        if not groups:
            await self.close()
            return
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept(subprotocol=BEARER_SUBPROTOCOL if self.scope.get("auth_method") == "bearer" else None)
        await self.after_accept()

    async def disconnect(self, code):
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = []

    async def receive(self, text_data=None, bytes_data=None):
        return None  # server-to-client only
